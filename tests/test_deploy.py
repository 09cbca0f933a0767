"""The production configuration documented in docs/CONFIGURATION.md passes ``manage.py check --deploy``."""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.redis_url import TEST_REDIS_URL

ROOT = Path(__file__).resolve().parent.parent


def documented_production_env() -> dict[str, str]:
    """The env lines of docs/CONFIGURATION.md's "Production" block, placeholders filled in."""
    text = (ROOT / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")
    section = text.split("## Production", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    out = {}
    for line in block.splitlines():
        name, _, value = line.partition("=")
        if value.startswith("<"):
            value = secrets.token_urlsafe(50)
        out[name.strip()] = value.strip()
    return out


def run(env: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "EMAIL_"))}
    base.update(DJANGO_SETTINGS_MODULE="config.settings", MEMORY_DB=str(tmp_path / "deploy.sqlite3"), **env)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120)


def test_documented_production_env_passes_check_deploy(tmp_path):
    env = documented_production_env()
    assert env["DJANGO_DEBUG"] == "0" and env["DJANGO_SECURE_PROXY_SSL_HEADER"]
    result = run(env, tmp_path, "manage.py", "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout, result.stdout + result.stderr


def test_without_a_declared_https_proxy_check_deploy_still_warns(tmp_path):
    env = {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": secrets.token_urlsafe(50)}
    result = run(env, tmp_path, "manage.py", "check", "--deploy")
    for code in ("W004", "W008", "W012", "W016"):
        assert f"security.{code}" in result.stdout + result.stderr


@pytest.mark.parametrize(("env", "expected"), [
    ({}, "False False False 0 None"),
    ({"DJANGO_DEBUG": "1"}, "True False False 0 None"),
    ({"DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto"},
     "False True True 31536000 ('HTTP_X_FORWARDED_PROTO', 'https')"),
    ({"DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto", "DJANGO_DEBUG": "1"},
     "True False False 0 ('HTTP_X_FORWARDED_PROTO', 'https')"),
    ({"DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto", "DJANGO_SECURE_SSL_REDIRECT": "0"},
     "False False True 31536000 ('HTTP_X_FORWARDED_PROTO', 'https')"),
])
def test_https_switches_follow_debug_and_the_declared_proxy(tmp_path, env, expected):
    code = ("import config.settings as s; print(s.DEBUG, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE"
            " and s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, s.SECURE_PROXY_SSL_HEADER)")
    result = run(env, tmp_path, "-c", code)
    assert result.stdout.strip() == expected, result.stderr


REFUSAL = "DJANGO_DEBUG is off and DJANGO_SECRET_KEY is not set"


@pytest.mark.parametrize("env", [{}, {"DJANGO_DEBUG": "0"}, {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "  "}])
def test_the_web_server_refuses_the_public_key_with_debug_off(tmp_path, env):
    """gunicorn and runserver load config.wsgi: it refuses, saying what to set; nothing is served."""
    result = run(env, tmp_path, "-c", "import config.wsgi")
    assert result.returncode != 0
    assert f"refusing to start the web server: {REFUSAL}" in result.stderr
    assert "DJANGO_SECRET_KEY to 50+ random characters" in result.stderr


@pytest.mark.parametrize("env", [{"DJANGO_DEBUG": "1"}, {"DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": secrets.token_urlsafe(50)}])
def test_the_web_server_starts_with_a_key_or_with_debug_on(tmp_path, env):
    result = run(env, tmp_path, "-c", "import config.wsgi; print(callable(config.wsgi.application))")
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr


@pytest.mark.parametrize("process", ["worker", "beat"])
def test_the_worker_and_the_beat_refuse_the_public_key_before_reaching_the_broker(tmp_path, process):
    # a broker nobody listens on: the refusal comes first, so the process exits instead of retrying a connection
    env = {"REDIS_URL": urlsplit(TEST_REDIS_URL)._replace(netloc="127.0.0.1:9").geturl()}
    args = ["-m", "celery", "-A", "config", process, "--loglevel", "INFO"]
    args += ["--pool", "solo"] if process == "worker" else ["--schedule", str(tmp_path / "beat-schedule")]
    result = run(env, tmp_path, *args)
    assert result.returncode != 0
    assert f"refusing to start the {process}: {REFUSAL}" in result.stdout + result.stderr


def test_management_commands_still_run_without_a_key(tmp_path):
    """They serve nothing and sign nothing: `manage.py check` (and migrate, create_api_token …) run as before."""
    result = run({"DJANGO_DEBUG": "0"}, tmp_path, "manage.py", "check")
    assert result.returncode == 0, result.stdout + result.stderr
