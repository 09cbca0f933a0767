from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import urls as auth_urls
from django.contrib.auth import views as auth_views
from django.http import Http404
from django.urls import include, path

from config.api import api
from memory.api.health import healthz

PASSWORD_RESET_VIEWS = {"password_reset", "password_reset_done", "password_reset_confirm", "password_reset_complete"}


def _needs_mail(view):
    """Password reset mails a link: without configured mail (``PASSWORD_RESET_ENABLED``) its pages are 404."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not settings.PASSWORD_RESET_ENABLED:
            raise Http404("password reset needs e-mail (EMAIL_HOST or EMAIL_BACKEND)")
        return view(request, *args, **kwargs)

    return wrapped


class LoginView(auth_views.LoginView):
    """The login page; it links to password reset only when mail is configured."""

    def get_context_data(self, **kwargs):
        return super().get_context_data(password_reset_enabled=settings.PASSWORD_RESET_ENABLED, **kwargs)


account_urls = [path("login/", LoginView.as_view(), name="login")] + [
    path(str(p.pattern), _needs_mail(p.callback), name=p.name) if p.name in PASSWORD_RESET_VIEWS else p
    for p in auth_urls.urlpatterns
    if p.name != "login"
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("accounts/", include(account_urls)),
    path("i18n/", include("django.conf.urls.i18n")),
    path("curation/", include("curation.urls")),
    path("tuning/", include("tuning.urls")),
    path("", include("console.urls")),
]
