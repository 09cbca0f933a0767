"""The curation pages (namespace ``curation``, mounted at ``/curation/``)."""
from __future__ import annotations

from django.urls import path

from curation import views

app_name = "curation"
urlpatterns = [
    path("facts/<int:pk>/<str:action>/", views.fact_action, name="fact_action"),
    path("facts/bulk/", views.bulk_action, name="bulk_action"),
    path("conflicts/", views.conflicts, name="conflicts"),
    path("conflicts/keep/<int:pk>/", views.keep, name="keep"),
    path("conflicts/keep-all/<int:pk>/", views.keep_all, name="keep_all"),
    path("operations/", views.operations, name="operations"),
    path("operations/<int:pk>/undo/", views.undo, name="undo"),
]
