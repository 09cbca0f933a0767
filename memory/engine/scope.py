"""Visibility scope of facts: where a fact was heard decides where it may be recalled.

* ``group``-origin and ``legacy`` facts are visible everywhere.
* ``direct``-origin facts (heard in a private chat or the desktop) are hidden in group
  streams unless the deployment sets ``private_facts_in_group``.
* Unknown origins are treated as ``legacy`` (visible).

``SCOPE_ALL`` is the bypass value, meant only for the extraction de-duplication list.
"""

from __future__ import annotations

__all__ = [
    "ORIGIN_LEGACY",
    "ORIGIN_DIRECT",
    "ORIGIN_GROUP",
    "ORIGINS",
    "SCOPE_ALL",
    "STREAM_GROUP",
    "origin_kind_for_stream",
    "fact_visible_in_stream",
    "upgraded_origin",
]

ORIGIN_LEGACY: str = "legacy"
ORIGIN_DIRECT: str = "direct"
ORIGIN_GROUP: str = "group"
ORIGINS: tuple[str, ...] = (ORIGIN_LEGACY, ORIGIN_DIRECT, ORIGIN_GROUP)
SCOPE_ALL: str = "all"
STREAM_GROUP: str = "group"


def origin_kind_for_stream(stream_kind: str) -> str:
    """Origin recorded for a fact heard in a stream: ``group`` → ``group``, anything else → ``direct``."""
    return ORIGIN_GROUP if stream_kind == STREAM_GROUP else ORIGIN_DIRECT


def fact_visible_in_stream(origin: str | None, stream_kind: str, *, private_in_group: bool = False) -> bool:
    """Whether a fact of ``origin`` may be recalled in a stream of ``stream_kind``.

    ``direct`` → visible iff the stream is not a group or ``private_in_group``;
    ``group``, ``legacy`` and unknown origins → always visible.
    """
    if origin == ORIGIN_DIRECT:
        return stream_kind != STREAM_GROUP or private_in_group
    return True


def upgraded_origin(existing: str, incoming: str) -> str:
    """Origin after a reinforcement hit: only ``direct`` → ``group`` is allowed; otherwise unchanged."""
    if existing == ORIGIN_DIRECT and incoming == ORIGIN_GROUP:
        return ORIGIN_GROUP
    return existing
