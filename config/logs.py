"""How the processes log: one clock, one line format, no routine noise.

Web (gunicorn), worker and beat write ``[YYYY-MM-DD HH:MM:SS,mmm: LEVEL/who] message``
(Celery's own format) in ``TIME_ZONE``'s local time, so the lines of one terminal
or one journal read as one timeline. Left out, because they say nothing an operator
acts on:

* gunicorn's access lines for static files and a healthy ``/healthz`` (the page that
  loaded the files is logged; a load balancer asks for its health every few seconds);
* Django's line for each request refused with 503 while the database is unreachable: the
  outage is logged once (``config/outage.py``), not once per request;
* the traceback of a refused request (403, 404): Django logs the exception of every
  4xx with ``exc_info``; the one line ``Forbidden (Permission denied): /graph/`` stays;
* Celery's "received", "succeeded" and "Sending due task" lines of the beat's routine
  sweeps (``CELERY_BEAT_SCHEDULE``): each sweep logs a line of its own when it found
  work; failures are errors and are kept.

Nothing here imports Django: gunicorn loads it before the settings exist.
"""
from __future__ import annotations

import logging
import os
import time

from gunicorn.glogging import Logger as GunicornLogger

FORMAT = "[%(asctime)s: %(levelname)s/%(processName)s] %(message)s"
#: Static files and health checks: served without a line in the access log.
QUIET_PATHS = ("/static/", "/favicon.ico", "/healthz")


def use_local_clock() -> None:
    """Every process of a deployment tells time in ``TIME_ZONE`` (Django sets ``TZ`` only once it has loaded,
    after a gunicorn master has written its first lines in the machine's zone)."""
    os.environ.setdefault("TZ", os.environ.get("TIME_ZONE", "Asia/Shanghai"))
    time.tzset()


class WebLogger(GunicornLogger):
    """gunicorn's logger with the project's line format; static files and health checks are not access-logged."""

    error_fmt = "[%(asctime)s: %(levelname)s/web %(process)d] %(message)s"
    datefmt = None  # logging's default, as Celery's: 2026-01-31 18:05:09,123
    access_fmt = "[%(asctime)s: INFO/web] %(message)s"

    def access(self, resp, req, environ, request_time) -> None:
        path = environ.get("PATH_INFO") or ""
        if path.startswith(QUIET_PATHS) and str(getattr(resp, "status", "")).startswith(("2", "3")):
            return
        super().access(resp, req, environ, request_time)


class RefusalWithoutTraceback(logging.Filter):
    """A 4xx response is logged as one line: its exception (PermissionDenied, Http404) is the reason, not a fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        if 400 <= getattr(record, "status_code", 0) < 500:
            record.exc_info = None
            record.exc_text = None
        return True


class OutageReported(logging.Filter):
    """Drop Django's ``Service Unavailable: <path>`` line of a request refused for an unreachable database:
    ``config/outage.py`` logs such an outage once, not once per request."""

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        return not (getattr(record, "status_code", 0) == 503 and getattr(request, "database_outage", False))


class QuietRoutineTasks(logging.Filter):
    """Drop Celery's INFO lines about the beat's routine tasks (``names``: task names)."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        args = record.args
        values = args.values() if isinstance(args, dict) else (args if isinstance(args, tuple) else ())
        return not any(isinstance(v, str) and v in self.names for v in values)


def quiet_routine_tasks(names: set[str]) -> None:
    """Install :class:`QuietRoutineTasks` on the loggers that announce a task (worker) or send one (beat)."""
    quiet = QuietRoutineTasks(names)
    for name in ("celery.worker.strategy", "celery.app.trace", "celery.beat"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietRoutineTasks) for f in logger.filters):
            logger.addFilter(quiet)
