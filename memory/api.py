"""The bot-facing JSON API (django-ninja). Routers are added by the API module owners."""
from __future__ import annotations

from ninja import NinjaAPI

api = NinjaAPI(title="Memory Console API", version="1", urls_namespace="api")
