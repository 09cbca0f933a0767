"""Fixtures shared by several test folders."""
from __future__ import annotations

import pytest
from pytest_django.fixtures import validate_django_db

from tests.providers.conftest import FakeOpenAI


def pytest_configure(config: pytest.Config) -> None:
    """The suite's own Redis database is the test one (``tests/redis_url.py``), for the whole run.

    What a test publishes or stores without saying where — a task sent after a commit, the shared
    activation — went to ``REDIS_URL``'s default, database 0: a deployment's broker on this machine
    (an evaluate task of the API fuzzing run was found waiting there for a worker to pick it up, and
    the processes integration tests start lit its short-term activation). This process's settings
    and Celery app, and the environment the processes a test starts inherit, now name the test
    database; ``tests.redis_url.DEPLOYMENT_REDIS_URL`` keeps what the run was started with."""
    import os

    from django.conf import settings

    from config.celery import app
    from tests.redis_url import TEST_REDIS_URL

    os.environ["REDIS_URL"] = TEST_REDIS_URL
    settings.REDIS_URL = settings.CELERY_BROKER_URL = TEST_REDIS_URL
    app.conf.broker_url = TEST_REDIS_URL


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Every transactional test must also roll back serialized: ``django_db(transaction=True, serialized_rollback=True)``.

    A transactional test empties every table when it ends. With serialized rollback the next such test reloads what
    the migrations wrote (content types, permissions, the rows of data migrations) under the same ids; without it the
    flush re-runs ``post_migrate``, which recreates the content types under new ids, and the next serialized-rollback
    test then fails to reload them ("UNIQUE constraint failed: django_content_type") — but only in the orders where
    it runs after this one. Refused here, in every order.
    """
    from django.test import TestCase, TransactionTestCase

    cls = getattr(item, "cls", None)
    if cls is not None and issubclass(cls, TransactionTestCase):
        transactional = not issubclass(cls, TestCase)
        serialized = cls.serialized_rollback
    else:
        marker = item.get_closest_marker("django_db")
        transaction, reset_sequences, _, serialized, _ = validate_django_db(marker) if marker else (False,) * 5
        fixtures = getattr(item, "fixturenames", ())
        transactional = transaction or reset_sequences or "transactional_db" in fixtures or "live_server" in fixtures
        serialized = serialized or "django_db_serialized_rollback" in fixtures
    if transactional and not serialized:
        pytest.fail(f"{item.nodeid}: a transactional test needs serialized_rollback=True too "
                    "(see pytest_runtest_setup in tests/conftest.py)", pytrace=False)


@pytest.fixture(scope="session")
def _fake_openai_server():
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def fake_openai(_fake_openai_server: FakeOpenAI) -> FakeOpenAI:
    from memory.providers.embeddings import reset_breakers

    _fake_openai_server.reset()
    reset_breakers()  # one server for the session: each test starts with it presumed up
    return _fake_openai_server


@pytest.fixture(autouse=True)
def _broker_breaker_closed():
    """Each test starts with Redis presumed up (memory/broker.py keeps a per-process breaker)."""
    from memory import broker

    broker.reset()
    yield
    broker.reset()


@pytest.fixture(autouse=True)
def _default_language():
    """Each test starts in the default language: a request's LocaleMiddleware (an English page, an
    ``Accept-Language: en`` API call) leaves its language active in the thread after the response."""
    from django.utils import translation

    translation.deactivate()  # LANGUAGE_CODE
    yield
    translation.deactivate()
