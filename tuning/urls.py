from __future__ import annotations

app_name = "tuning"
urlpatterns: list = []
