"""Fixtures of the tuning tests: a clean live-override cache around every test."""
from __future__ import annotations

import pytest

from memory import overrides


@pytest.fixture(autouse=True)
def _fresh_override_cache():
    overrides.reset_cache()
    yield
    overrides.reset_cache()
