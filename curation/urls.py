from __future__ import annotations

app_name = "curation"
urlpatterns: list = []
