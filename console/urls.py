from __future__ import annotations

from django.urls import path

from console import views
from memory.privacy import views as privacy_views

app_name = "console"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("dashboard/workers/", views.worker_health, name="worker_health"),
    path("streams/", views.streams, name="streams"),
    path("streams/<int:pk>/", views.stream, name="stream"),
    path("episodes/", views.episodes, name="episodes"),
    path("episodes/<int:pk>/", views.episode, name="episode"),
    path("facts/", views.facts, name="facts"),
    path("facts/<int:pk>/", views.fact, name="fact"),
    path("knowledge/", views.knowledge, name="knowledge"),
    path("imports/", views.imports, name="imports"),
    path("imports/<int:pk>/delete/", views.import_delete, name="import_delete"),
    path("graph/", views.graph, name="graph"),
    path("playground/", views.playground, name="playground"),
    path("jobs/", views.jobs, name="jobs"),
    path("help/", views.help_page, name="help"),
    path("jobs/<int:pk>/", views.job, name="job"),
    path("persons/", privacy_views.persons, name="persons"),
    path("persons/<int:pk>/export/", privacy_views.person_export, name="person_export"),
    path("forget/<str:target>/<int:pk>/", privacy_views.forget_target, name="forget"),
    path("tokens/", privacy_views.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke/", privacy_views.token_revoke, name="token_revoke"),
]
