# Memory Console — everything a newcomer needs.
# `make run` sets up (venv, install, migrate, demo data) then starts web + worker + beat.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
export DJANGO_SETTINGS_MODULE := config.settings

.PHONY: setup run web worker beat test test-postgres test-fast bench bench-scale bench-hosts eval lint check demo demo-cluster clean screenshots

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.installed: requirements.txt | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	touch $@

setup: $(VENV)/.installed
	@echo "Preparing the database (migrate, roles, demo data) …"
	@$(BIN)/python manage.py migrate --noinput -v 0
	@$(BIN)/python manage.py ensure_roles -v 0
	@$(BIN)/python manage.py seed_demo --if-empty

# Local use shows tracebacks; a deployment leaves DJANGO_DEBUG off (docs/CONFIGURATION.md: Production).
run web: export DJANGO_DEBUG ?= 1

# scripts/run.py: starts Redis if none answers, then web + worker + beat with their lines prefixed; prints the
# console's address once it answers; Ctrl-C stops all of them (exit status 0).
run: setup
	@$(BIN)/python -m scripts.run --port $(PORT)

web: setup
	$(BIN)/python manage.py runserver 127.0.0.1:$(PORT)

worker: $(VENV)/.installed
	$(BIN)/celery -A config worker --loglevel=INFO

beat: $(VENV)/.installed
	mkdir -p .cache && $(BIN)/celery -A config beat --loglevel=INFO --schedule .cache/celerybeat-schedule

# Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set: pytest then keeps the assertion-rewritten test
# modules and plugin packages (schemathesis, hypothesis: ~10 s CPU per collection), and every process a test starts
# (workers, gunicorn, drivers, manage.py) loads the project's modules compiled.
test test-fast: export PYTHONDONTWRITEBYTECODE :=

test: $(VENV)/.installed
	$(BIN)/python -m pytest -q

test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -q -m "not integration and not browser"

# Every console page in both languages, per role (system Chromium): test-artifacts/screenshots/index.html
screenshots: $(VENV)/.installed
	SCREENSHOTS=1 $(BIN)/python -m pytest -q -p no:randomly tests/browser/test_screenshots.py
	@echo "Open test-artifacts/screenshots/index.html"

# Both backends when PostgreSQL answers (BENCH_BACKENDS=sqlite to skip it; bench/backends.py): the scale
# store is moved to PostgreSQL by copy_store once, the API runs with a real worker on each, the backends in
# interleaved rounds (bench/api_rounds.py: each measure the median of the rounds).
BENCH_API_ROUNDS ?= 3
BENCH_BACKENDS ?= $(shell $(BIN)/python -c "from bench.backends import requested; print(','.join(requested()))" 2>/dev/null || echo sqlite)

# `make bench SCALE=10` (or 3): the store at that scale instead, measured as `make bench-scale` measures it and
# merged beside the scales measured before (bench/results/scale.md).
bench: $(VENV)/.installed
ifdef SCALE
	$(BIN)/python -m bench.scale --scales $(SCALE) --backends $(BENCH_BACKENDS) --dir $(BENCH_SCALE_DIR) --merge
else
	$(BIN)/python -m bench.run --backends $(BENCH_BACKENDS)
	$(BIN)/python -m bench.api_bench
	$(BIN)/python -m bench.api_rounds --backends $(BENCH_BACKENDS) --rounds $(BENCH_API_ROUNDS)
	$(BIN)/python -m bench.console_bench
	$(BIN)/python -m bench.worker_bench --worker --backends $(BENCH_BACKENDS)
	$(BIN)/python -m bench.report
endif

# How the cost grows (bench/scale.py): the bench store at each of SCALES (1× = 200,000 messages; 10× needs ~25 GB
# free in BENCH_SCALE_DIR while it is built), read paths, writes and the API as deployed on each backend, side by
# side: bench/results/scale.md, scale.png, BENCHMARKS.md. Kept stores are reused.
SCALES ?= 1,3
BENCH_SCALE_DIR ?= bench/.cache
bench-scale: $(VENV)/.installed
	$(BIN)/python -m bench.scale --scales $(SCALES) --backends $(BENCH_BACKENDS) --dir $(BENCH_SCALE_DIR)

# A Celery worker in a network namespace (a second machine) reaching PostgreSQL and Redis over a
# veth; gunicorn on the host; checks that the worker builds episodes, facts and vectors (root, `ip`).
demo-cluster: $(VENV)/.installed
	$(BIN)/python -m scripts.demo_cluster

# What a second host buys (bench/hosts.py, root and `ip`): pipeline catch-up of 1,000 messages with 1 vs 2 worker
# hosts (the second in a network namespace, as demo-cluster), with a chat model answering in 300–800 ms and without
# one, and ingest with 1 vs 2 web processes, on PostgreSQL in interleaved rounds: bench/results/hosts.json, BENCHMARKS.md.
BENCH_HOSTS_ROUNDS ?= 3
bench-hosts: $(VENV)/.installed
	$(BIN)/python -m bench.hosts --rounds $(BENCH_HOSTS_ROUNDS)

eval: $(VENV)/.installed
	$(BIN)/python -m bench.eval
	$(BIN)/python -m bench.eval_api
	$(BIN)/python -m bench.eval_matrix

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/python manage.py makemigrations --check --dry-run

check: lint
	$(BIN)/python manage.py check

clean:
	rm -rf $(VENV) db.sqlite3 db.sqlite3-wal db.sqlite3-shm staticfiles test-artifacts

# The whole suite on PostgreSQL: `DATABASE_URL=<throwaway database on $(PG_HOST)> make test`. On exit — success,
# failure or interrupt — it drops that database and every one named after it (pytest's test_<name>, the
# <name>_it_* stores of tests/dbenv.py), so nothing is left behind even when pytest is killed.
PG_HOST ?= 127.0.0.1
PG_DB_PREFIX ?= memory_ci
test-postgres: $(VENV)/.installed
	@db=$(PG_DB_PREFIX)_$$(date +%s)_$$$$; \
	drop() { psql -h $(PG_HOST) -U postgres -qAtc "SELECT datname FROM pg_database WHERE datname IN ('$$db', 'test_$$db') OR starts_with(datname, '$${db}_it_')" \
	  | while read -r name; do psql -h $(PG_HOST) -U postgres -qc "DROP DATABASE IF EXISTS \"$$name\" WITH (FORCE)" >/dev/null; done; }; \
	trap drop EXIT; trap 'exit 130' INT TERM; \
	psql -h $(PG_HOST) -U postgres -qc "CREATE DATABASE \"$$db\"" && \
	DATABASE_URL=postgres://postgres@$(PG_HOST):5432/$$db $(MAKE) --no-print-directory test
