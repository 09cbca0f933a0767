"""Helpers shared by the selector modules: the active ranking overrides, the group-privacy default,
the SQ8 of a query vector."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from django.conf import settings

from memory import overrides as live
from memory.engine.context import ConversationQuery
from memory.engine.quantize import quantize_vector


def _overrides(overrides: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return live.active_overrides() if overrides is None else overrides


def private_facts_in_group() -> bool:
    """Whether a private fact may be recalled in a group stream (``PRIVATE_FACTS_IN_GROUP``)."""
    return settings.PRIVATE_FACTS_IN_GROUP


def _private_in_group(value: bool | None) -> bool:
    return private_facts_in_group() if value is None else value


def _query_q8(query_vector: Any) -> bytes | None:
    """SQ8 of a query vector (of the turn's own vector for a conversation query); None without one."""
    if isinstance(query_vector, ConversationQuery):
        query_vector = query_vector.primary
    if query_vector is None:
        return None
    vec = np.asarray(query_vector, dtype=np.float32).ravel()
    if vec.size == 0:
        return None
    return quantize_vector(vec)
