"""WSGI entry point (gunicorn config.wsgi; runserver loads it too)."""
from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

from config.startup import require_secret_key

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

require_secret_key("web server")
application = get_wsgi_application()
