"""gunicorn settings of ``make run`` (``gunicorn -c config/gunicorn.conf.py config.wsgi``).

The access log is gunicorn's default "combined" format without ``%(u)s``: that atom is
the user part of an ``Authorization: Basic`` header, which a client that puts its
``mc_…`` token there would see printed in the log. No atom here reads a header that
carries a credential (``Authorization``, ``Cookie``).
"""
from __future__ import annotations

access_log_format = '%(h)s %(l)s - %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'
