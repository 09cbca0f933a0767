"""Fixtures of the tuning tests: a clean live-override cache around every test."""
from __future__ import annotations

import pytest

from tuning import services


@pytest.fixture(autouse=True)
def _fresh_override_cache():
    services.reset_cache()
    yield
    services.reset_cache()
