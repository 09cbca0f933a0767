"""Shared pytest configuration; app-specific fixtures live in tests/*/conftest.py."""
from __future__ import annotations
