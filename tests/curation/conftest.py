"""Curation tests share the memory fixtures (persons, streams, fixed clock)."""
from __future__ import annotations

from tests.memory.conftest import (  # noqa: F401
    _fresh_activation,
    _fresh_overrides,
    _fresh_vector_index,
    _memory_settings,
    desktop_stream,
    direct_stream,
    group_stream,
    other_person,
    person,
)
