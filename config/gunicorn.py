"""gunicorn settings of `make run` (``gunicorn -c config/gunicorn.py config.wsgi``).

The access log is gunicorn's "combined" format without ``%(u)s``: that atom is the user
part of an ``Authorization: Basic`` header, which a client that puts its ``mc_…`` token
there would see printed in the log. No atom here reads a header that carries a
credential (``Authorization``, ``Cookie``). Its time, and every other line's, is written
like the worker's and beat's, in ``TIME_ZONE`` (``config/logs.py``: one clock; static
files and health checks are not access-logged).

Each worker imports the URLconf (every view, the API schemas), loads jieba's
dictionary and the local embedding model once it has loaded the app and before
it accepts a request, so its first request pays none of that (the model's load
time is logged: ``embedder_preloaded … load_ms=…``); then what it loaded is frozen out
of the garbage collector's full passes (memory/search/residency.py).
"""
from __future__ import annotations

import os

from config.logs import WebLogger, use_local_clock

use_local_clock()
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
# Threads per worker. On PostgreSQL a request spends part of its time waiting for the server
# (a message's commit waits for its flush to disk): a second thread serves another request
# meanwhile. SQLite has one writer at a time and commits without a flush: one thread.
threads = int(os.environ.get("GUNICORN_THREADS", "2" if os.environ.get("DATABASE_URL") else "1"))
accesslog = "-"
access_log_format = '%(h)s %(l)s - "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'
logger_class = WebLogger
# gunicorn's runtime control socket (gunicornc) is not used; its default path is shared by every
# gunicorn of the user, so two servers on one machine would fight over it.
control_socket_disable = True


def post_worker_init(worker) -> None:
    # gunicorn reads this file before Django is set up: the project loads in the hook, in each worker.
    from django.urls import get_resolver

    from memory.engine import tokenize
    from memory.providers.config import preload_embedder
    from memory.search import background, lexical_index, residency

    get_resolver().url_patterns  # noqa: B018 — imports every view and builds the API schemas (~2 s)
    tokenize.warm_up()  # jieba's dictionary: 1–3 s
    preload_embedder()
    background.bank_vectors()  # the relevance gate's background: the bank of chat lines, embedded once
    residency.settle_process()  # out of the collector's full passes (memory/search/residency.py)
    # the resident structures a turn reads (message statistics, facts' and cues' postings) load in a thread
    # of their own: the first turns take the statements, which give the same numbers (lexical_index.py)
    lexical_index.warm_up_in_background()
