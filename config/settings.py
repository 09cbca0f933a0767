"""Settings for Memory Console: one module, configured by environment variables.

Every value a deployment may want to change is read here through a small typed
helper; the defaults let a fresh clone run with only Redis on its usual port.
"""
from __future__ import annotations

import os
import socket
import warnings
from pathlib import Path

from celery.schedules import crontab

BASE_DIR = Path(__file__).resolve().parent.parent


def env(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def envbool(name: str, default: str = "False") -> bool:
    return env(name, default).strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: int) -> int:
    return int(env(name, str(default)))


def envfloat(name: str, default: float) -> float:
    return float(env(name, str(default)))


# The development key is public: with DEBUG off and no DJANGO_SECRET_KEY the web server, the worker and the beat
# refuse to start (config/startup.py); management commands still run (they sign nothing).
SECRET_KEY_SET = bool(env("DJANGO_SECRET_KEY").strip())
SECRET_KEY = env("DJANGO_SECRET_KEY").strip() or "dev-only-insecure-key-change-me"
# Off unless asked for: `make run` / `make web` turn it on for local use.
DEBUG = envbool("DJANGO_DEBUG", "False")
ALLOWED_HOSTS = [h for h in env("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in env("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# --- HTTPS ---------------------------------------------------------------------
# A TLS-terminating proxy is declared by the header it sets (e.g. X-Forwarded-Proto);
# the proxy must overwrite that header on every request. Behind a declared proxy with
# DEBUG off (or with DJANGO_HTTPS=1), HTTPS redirects, secure cookies and HSTS are on
# unless switched off one by one.
_proxy_header = env("DJANGO_SECURE_PROXY_SSL_HEADER", "").strip()
SECURE_PROXY_SSL_HEADER = ("HTTP_" + _proxy_header.upper().replace("-", "_"), "https") if _proxy_header else None
HTTPS = envbool("DJANGO_HTTPS", "True" if _proxy_header and not DEBUG else "False")
SECURE_SSL_REDIRECT = envbool("DJANGO_SECURE_SSL_REDIRECT", str(HTTPS))
SECURE_REDIRECT_EXEMPT = [r for r in env("DJANGO_SECURE_REDIRECT_EXEMPT", "").split(",") if r]
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = envbool("DJANGO_SECURE_COOKIES", str(HTTPS))
SECURE_HSTS_SECONDS = envint("DJANGO_HSTS_SECONDS", 31_536_000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", "False")
SECURE_HSTS_PRELOAD = envbool("DJANGO_HSTS_PRELOAD", "False")

# --- e-mail ----------------------------------------------------------------------
# Password reset mails a link: it exists only when mail is configured (EMAIL_HOST for
# SMTP, or an explicit EMAIL_BACKEND); otherwise its pages are 404 and the link is hidden.
EMAIL_HOST = env("EMAIL_HOST", "")
EMAIL_PORT = envint("EMAIL_PORT", 587)
EMAIL_HOST_USER = env("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", "True")
EMAIL_USE_SSL = envbool("EMAIL_USE_SSL", "False")
if EMAIL_USE_SSL:
    EMAIL_USE_TLS = False
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", "webmaster@localhost")
EMAIL_BACKEND = env("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
PASSWORD_RESET_ENABLED = bool(EMAIL_HOST or env("EMAIL_BACKEND"))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "ninja",  # serves its bundled Swagger UI for /api/docs (otherwise loaded from a CDN)
    "template_partials",
    "memory",
    "curation",
    "tuning",
    "console",  # the operator pages, on top of memory, curation and tuning
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "config.middleware.RefuseNulQueryMiddleware",
    "config.middleware.DatabaseOutageMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            "builtins": ["template_partials.templatetags.partials"],
        },
    }
]

WSGI_APPLICATION = "config.wsgi.application"

# SQLite is the embedded default. WAL lets the web process read while a worker
# writes; IMMEDIATE takes the write lock at BEGIN so two writers queue on the
# busy timeout instead of failing half-way with "database is locked".
# DATABASE_URL (postgres://user@host:5432/memory) selects PostgreSQL instead: the store
# web processes and workers on several machines share (docs/DEPLOY.md). Everything
# backend-specific lives in memory/backends/.
MEMORY_DB = env("MEMORY_DB", str(BASE_DIR / "db.sqlite3"))
DATABASE_URL = env("DATABASE_URL", "").strip()
# Keep connections: closing a WAL connection per request costs a checkpoint (~5 ms here);
# a PostgreSQL connection costs a backend start.
_CONN_MAX_AGE = envint("CONN_MAX_AGE", 600)
if DATABASE_URL:
    import dj_database_url

    DATABASES = {
        "default": dj_database_url.parse(DATABASE_URL, conn_max_age=_CONN_MAX_AGE, conn_health_checks=True)
    }
    if DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        raise ValueError("DATABASE_URL must name a PostgreSQL database (postgres://…); unset it for SQLite")
    # Django's backend, with a health check that costs no round trip on an idle connection (config/postgresql/)
    DATABASES["default"]["ENGINE"] = "config.postgresql"
    # Parameters bound by the server, and a statement run again (every turn's, every message's)
    # prepared once per connection, not parsed and planned each time: psycopg prepares it once it
    # has run PG_PREPARE_THRESHOLD times (5). Behind PgBouncer in transaction pooling (before 1.21) set it
    # to 0: no statement is prepared (docs/DEPLOY.md, "Connections").
    _prepare_threshold = envint("PG_PREPARE_THRESHOLD", 5)
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        server_side_binding=True, prepare_threshold=_prepare_threshold if _prepare_threshold > 0 else None
    )
    DATABASES["default"]["TEST"] = {"NAME": env("MEMORY_TEST_DB", "") or None}
else:
    # A commit that finds the write-ahead log past this many pages (~4 kB each) copies it back into
    # the database file first. Web processes leave that to the workers (SQLite's 1000 pages) and
    # to the beat's checkpoint every minute, so a turn does not pay for it; this is their bound
    # when no worker runs (docs/DEPLOY.md).
    SQLITE_WEB_WAL_AUTOCHECKPOINT = envint("SQLITE_WEB_WAL_AUTOCHECKPOINT", 10_000)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": MEMORY_DB,
            "OPTIONS": {
                "transaction_mode": "IMMEDIATE",
                "timeout": envint("SQLITE_BUSY_TIMEOUT", 20),
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"
                f" PRAGMA wal_autocheckpoint={SQLITE_WEB_WAL_AUTOCHECKPOINT};",
            },
            "TEST": {"NAME": env("MEMORY_TEST_DB", "") or None},
            "CONN_MAX_AGE": _CONN_MAX_AGE,
            "CONN_HEALTH_CHECKS": True,
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console:dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "zh-hans"
LANGUAGES = [("zh-hans", "简体中文"), ("en", "English")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = env("TIME_ZONE", "Asia/Shanghai")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# WhiteNoise serves static files from gunicorn too; finders let it serve them
# straight from static/ and the apps without a collectstatic step.
WHITENOISE_USE_FINDERS = True
# Until `collectstatic` has run, STATIC_ROOT does not exist; the finders serve everything.
warnings.filterwarnings("ignore", message="No directory at")

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# One line format for web, worker and beat (config/logs.py); Django's own loggers write through the
# same handler once (its default adds a second one under DEBUG), a refused request (4xx) without its traceback.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"line": {"format": "[%(asctime)s: %(levelname)s/%(processName)s] %(message)s"}},
    "filters": {"refusals": {"()": "config.logs.RefusalWithoutTraceback"}, "outages": {"()": "config.logs.OutageReported"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "line", "filters": ["refusals", "outages"]}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO")},
    "loggers": {"django": {"handlers": ["console"], "level": env("LOG_LEVEL", "INFO"), "propagate": False}},
}

# --- Celery -----------------------------------------------------------------
REDIS_URL = env("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = REDIS_URL
# kombu's Redis transport, with an acknowledgement lost on a dead connection freeing the worker's slot
# (config/broker_transport.py): a failover must not leave a worker that takes no task again.
CELERY_BROKER_TRANSPORT = "config.broker_transport:Transport"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = False
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker lowers its CPU priority to this niceness when it starts (its pool's children inherit it):
# on a host shared with the web processes, summarising and embedding yield the cores to the bot's
# turns. 0 leaves it as started; a worker started at a higher niceness keeps its own.
WORKER_NICENESS = envint("WORKER_NICENESS", 10)
# A stored message queues the embedding backfill this many seconds later (one task per burst), so a
# turn's confirm finds the conversation's last lines embedded instead of embedding them on the
# request path; the delay keeps that work out of the reply to the line just stored. Negative: only
# the beat's backfill (every 3 minutes) embeds messages. Without an embedder nothing is queued.
MESSAGE_VECTOR_DELAY = envint("MESSAGE_VECTOR_DELAY", 2)
# A hung Redis (accepts, never answers) must not hold a request: every Redis call outside
# Celery's consumer loop (enqueue markers, per-stream locks, the pre-publish check) waits at
# most these timeouts, then the process skips Redis for BROKER_DOWN_SECONDS (memory/broker.py).
REDIS_CONNECT_TIMEOUT = envfloat("REDIS_CONNECT_TIMEOUT", 0.1)
REDIS_SOCKET_TIMEOUT = envfloat("REDIS_SOCKET_TIMEOUT", 0.1)
BROKER_DOWN_SECONDS = envfloat("BROKER_DOWN_SECONDS", 5.0)
# Celery's own connections (publish, ack): bounded too (kombu's default is to wait forever).
# The consumer's BRPOP runs in the event loop and is not subject to socket_timeout.
CELERY_BROKER_CONNECTION_TIMEOUT = envfloat("BROKER_CONNECT_TIMEOUT", 1.0)
# Half-open connections (a failover or a NAT that drops the peer without closing the socket):
# every Redis connection of every process sends TCP keepalives (the kernel closes one whose peer
# stopped answering after REDIS_KEEPALIVE_IDLE s + 3 probes 5 s apart), and a pooled connection
# idle for REDIS_HEALTH_CHECK_INTERVAL s is pinged before it is used again; kombu also drops a
# worker's BRPOP connection whose reply is that much overdue (memory/broker.py).
REDIS_KEEPALIVE_IDLE = envint("REDIS_KEEPALIVE_IDLE", 30)
REDIS_HEALTH_CHECK_INTERVAL = envint("REDIS_HEALTH_CHECK_INTERVAL", 10)


def _keepalive_options() -> dict[int, int]:
    wanted = {"TCP_KEEPIDLE": REDIS_KEEPALIVE_IDLE, "TCP_KEEPINTVL": 5, "TCP_KEEPCNT": 3}
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


REDIS_KEEPALIVE_OPTIONS = _keepalive_options()
# A task a worker received but never acknowledged (the worker was SIGKILLed, or its host died) is
# delivered again only this long after it was received. Longer than the longest hard time limit of
# any task (the tuning fit, 7,260 s) plus its longest retry delay (300 s), so a task still running
# is never delivered a second time; what a killed worker left is redone well before by the
# sweeps and job leases (docs/DEPLOY.md, "A killed worker").
BROKER_VISIBILITY_TIMEOUT = envint("BROKER_VISIBILITY_TIMEOUT", 7800)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "socket_connect_timeout": envfloat("BROKER_CONNECT_TIMEOUT", 1.0),
    "socket_timeout": envfloat("BROKER_SOCKET_TIMEOUT", 1.0),
    "socket_keepalive": True,
    "socket_keepalive_options": REDIS_KEEPALIVE_OPTIONS,
    "health_check_interval": REDIS_HEALTH_CHECK_INTERVAL,
    "visibility_timeout": BROKER_VISIBILITY_TIMEOUT,
}
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0, "interval_max": 0}
# The beat's sweep of streams whose summarisation or extraction is due but was never enqueued (a
# broker outage): after any broker fault the work catches up within this many seconds.
STREAM_CHECKS_INTERVAL = envfloat("STREAM_CHECKS_INTERVAL", 300)
CELERY_BEAT_SCHEDULE = {
    # Edges decay by the clock, not by traffic: sweep every 6 hours (minute 7).
    "memory-decay-edges": {"task": "memory.tasks.edges_decay_task", "schedule": crontab(minute=7, hour="*/6")},
    # Vectors are a side channel: pick up anything left NULL every 3 minutes.
    "memory-backfill-vectors": {"task": "memory.tasks.vectors_backfill_task", "schedule": crontab(minute="*/3")},
    # Streams whose summarisation/extraction is due but was never enqueued (broker outage): every 5 minutes.
    "memory-stream-checks": {"task": "memory.tasks.stream_checks_sweep_task", "schedule": STREAM_CHECKS_INTERVAL},
    # Jobs whose worker died without a restart under the same name (lease ran out): every 5 minutes (minute 2).
    "memory-recover-jobs": {"task": "memory.tasks.jobs_recover_task", "schedule": crontab(minute="2-59/5")},
    # SQLite: the write-ahead log copied back into the database file off the request path, every minute.
    "memory-wal-checkpoint": {"task": "memory.tasks.wal_checkpoint_task", "schedule": crontab()},
    # pipeline_events and turns are bounded (memory/pipeline/retention.py): every hour at minute 17.
    "memory-retention": {"task": "memory.tasks.retention_sweep_task", "schedule": crontab(minute=17)},
    # Message bodies past MESSAGE_RETENTION_DAYS (off by default): daily at 03:41.
    "memory-message-retention": {"task": "memory.tasks.expire_message_bodies_task", "schedule": crontab(minute=41, hour=3)},
}
# A running job with no heartbeat (start or progress write) for this long lost its worker.
JOB_LEASE_SECONDS = envint("JOB_LEASE_SECONDS", 900)
# A re-queued import / evaluation is started at most this many times, then failed with the reason.
JOB_MAX_ATTEMPTS = envint("JOB_MAX_ATTEMPTS", 3)
# Retention (memory/pipeline/retention.py): events older than 72 h or beyond the newest 20 000 go, as in
# the reference; turns older than 30 days or beyond the newest 5 000 go, but the newest 500 (what
# trace-replay evaluation can replay) always stay.
EVENT_RETENTION_COUNT = envint("EVENT_RETENTION_COUNT", 20_000)
EVENT_RETENTION_HOURS = envfloat("EVENT_RETENTION_HOURS", 72)
TURN_RETENTION_COUNT = envint("TURN_RETENTION_COUNT", 5_000)
TURN_RETENTION_HOURS = envfloat("TURN_RETENTION_HOURS", 720)
# Message bodies that are summarised and extracted and older than this many days are emptied
# (the row and its links stay; its FTS row and vector go). 0 = keep bodies for ever (default).
MESSAGE_RETENTION_DAYS = envint("MESSAGE_RETENTION_DAYS", 0)

# --- Memory engine knobs (docs/REFERENCE.md §18 schema defaults) --------------
WORKING_MEMORY_MESSAGES = envint("WORKING_MEMORY_MESSAGES", 40)
SUMMARIZE_TRIGGER_MESSAGES = envint("SUMMARIZE_TRIGGER_MESSAGES", 48)
SUMMARIZE_BATCH_MESSAGES = envint("SUMMARIZE_BATCH_MESSAGES", 16)
FACT_EXTRACT_TRIGGER_MESSAGES = envint("FACT_EXTRACT_TRIGGER_MESSAGES", 32)
FACT_EXTRACT_BATCH_MESSAGES = envint("FACT_EXTRACT_BATCH_MESSAGES", 12)
FACT_RECALL_LIMIT = envint("FACT_RECALL_LIMIT", 6)
RECALLED_EPISODE_LIMIT = envint("RECALLED_EPISODE_LIMIT", 2)
RECENT_EPISODE_LIMIT = envint("RECENT_EPISODE_LIMIT", 2)
EPISODE_CONTEXT_LIMIT = envint("EPISODE_CONTEXT_LIMIT", 3)
MEMORY_BOT_NAME = env("MEMORY_BOT_NAME", "")  # how the bot is called in summaries/extraction prompts
PRIVATE_FACTS_IN_GROUP = envbool("PRIVATE_FACTS_IN_GROUP", "False")
MESSAGE_MAX_CHARS = envint("MESSAGE_MAX_CHARS", 20000)
# Queries over a whole table (knowledge, every person's facts, every stream's cues) are
# ranked by a per-process resident BM25 index that scores like unpruned FTS5
# (memory/search/lexical_index.py; a few MB per 10k rows). Off: FTS5 answers, with query terms
# found in more than FTS_PRUNE_DF_RATIO of the rows dropped first (tables of 2,000+ rows;
# lower is faster, higher stays closer to unpruned bm25 — BENCHMARKS.md measures both).
LEXICAL_RESIDENT_INDEX = envbool("LEXICAL_RESIDENT_INDEX", "True")
FTS_PRUNE_DF_RATIO = envfloat("FTS_PRUNE_DF_RATIO", 0.1)
# Knowledge vector search scores every stored vector (int8, exact) up to KNOWLEDGE_EXACT_ROWS
# rows; above that it ranks exactly only the KNOWLEDGE_SKETCH_CANDIDATES rows whose sign codes
# are nearest the query's (approximate; measured recall in docs/ARCHITECTURE.md, "The knowledge
# vector index"). 0 keeps every size exact.
KNOWLEDGE_EXACT_ROWS = envint("KNOWLEDGE_EXACT_ROWS", 100_000)
KNOWLEDGE_SKETCH_CANDIDATES = envint("KNOWLEDGE_SKETCH_CANDIDATES", 2048)
# Long-lived structures (the resident indexes, jieba's dictionary) are frozen out of the
# cyclic garbage collector's full passes once loaded, which otherwise stall a turn for
# 150+ ms now and then (memory/search/residency.py).
RESIDENT_GC_FREEZE = envbool("RESIDENT_GC_FREEZE", "True")

# --- Model providers ----------------------------------------------------------
LLM_BASE_URL = env("LLM_BASE_URL")
LLM_MODEL = env("LLM_MODEL")
LLM_API_KEY = env("LLM_API_KEY")
LLM_TIMEOUT = envfloat("LLM_TIMEOUT", 60.0)
EMBEDDING_PROVIDER = env("EMBEDDING_PROVIDER", "local")  # local | openai | none
EMBEDDING_BASE_URL = env("EMBEDDING_BASE_URL")
EMBEDDING_MODEL = env("EMBEDDING_MODEL")
EMBEDDING_API_KEY = env("EMBEDDING_API_KEY")
EMBEDDING_DIM = envint("EMBEDDING_DIM", 512)
EMBEDDING_BATCH = min(envint("EMBEDDING_BATCH", 20), 20)  # provider hard limit
EMBEDDING_THREADS = envint("EMBEDDING_THREADS", 1)
# A remote provider: the workers' calls (timeout, retries); a call a request waits on (confirm, search)
# gets one attempt of EMBEDDING_QUERY_TIMEOUT; after a timeout, refused connection, 5xx or 429 the
# process skips the provider for EMBEDDING_DOWN_SECONDS (memory/providers/embeddings.py).
EMBEDDING_TIMEOUT = envfloat("EMBEDDING_TIMEOUT", 30.0)
EMBEDDING_RETRIES = envint("EMBEDDING_RETRIES", 3)
EMBEDDING_QUERY_TIMEOUT = envfloat("EMBEDDING_QUERY_TIMEOUT", 2.0)
EMBEDDING_DOWN_SECONDS = envfloat("EMBEDDING_DOWN_SECONDS", 30.0)

# Short-term spreading activation (recently recalled memory nodes spread more for ~10 min):
# "redis" = one table in REDIS_URL shared by every web and worker host (memory/search/activation.py),
# "process" = a table per process (the test settings: unit tests never write to Redis).
SHORT_TERM_ACTIVATION = env("SHORT_TERM_ACTIVATION", "redis")

# Enqueue summarisation/extraction checks after each stored message (tests turn it off).
MEMORY_ENQUEUE_TASKS = envbool("MEMORY_ENQUEUE_TASKS", "True")
