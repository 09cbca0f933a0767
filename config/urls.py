from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from memory.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("curation/", include("curation.urls")),
    path("tuning/", include("tuning.urls")),
    path("", include("memory.urls")),
]
