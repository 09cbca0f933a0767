"""Console pages of retrieval tuning, mounted at ``/tuning/``."""
from __future__ import annotations

from django.urls import path

from tuning import views

app_name = "tuning"
urlpatterns = [
    path("", views.index, name="index"),
    path("draft/", views.draft, name="draft"),
    path("apply/", views.apply, name="apply"),
    path("rollback/", views.rollback, name="rollback"),
    path("delete/", views.delete, name="delete"),
    path("export/", views.export, name="export"),
    path("compare/", views.compare, name="compare"),
    path("jobs/<int:pk>/", views.job, name="job"),
    path("jobs/<int:pk>/report.json", views.job_json, name="job_json"),
    path("fit/", views.fit_start, name="fit"),
    path("jobs/<int:pk>/apply/", views.fit_apply, name="fit_apply"),
    path("labels/", views.labels, name="labels"),
    path("labels/export/", views.labels_export, name="labels_export"),
]
