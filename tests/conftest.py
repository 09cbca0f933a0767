"""Fixtures shared by several test folders."""
from __future__ import annotations

import pytest

from tests.providers.conftest import FakeOpenAI


@pytest.fixture(scope="session")
def _fake_openai_server():
    server = FakeOpenAI()
    yield server
    server.close()


@pytest.fixture
def fake_openai(_fake_openai_server: FakeOpenAI) -> FakeOpenAI:
    _fake_openai_server.reset()
    return _fake_openai_server


@pytest.fixture(autouse=True)
def _broker_breaker_closed():
    """Each test starts with Redis presumed up (memory/broker.py keeps a per-process breaker)."""
    from memory import broker

    broker.reset()
    yield
    broker.reset()
