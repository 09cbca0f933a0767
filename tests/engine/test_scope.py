"""Visibility scope — docs/REFERENCE.md §9."""

from __future__ import annotations

import pytest

from memory.engine.scope import (
    ORIGIN_DIRECT,
    ORIGIN_GROUP,
    ORIGIN_LEGACY,
    SCOPE_ALL,
    fact_visible_in_stream,
    origin_kind_for_stream,
    upgraded_origin,
)


def test_constants() -> None:
    assert (ORIGIN_LEGACY, ORIGIN_DIRECT, ORIGIN_GROUP, SCOPE_ALL) == ("legacy", "direct", "group", "all")


def test_direct_hidden_in_group() -> None:  # 50
    assert fact_visible_in_stream("direct", "group") is False
    assert fact_visible_in_stream("direct", "group", private_in_group=True) is True


@pytest.mark.parametrize("stream", ["direct", "desktop"])
def test_direct_visible_outside_groups(stream: str) -> None:
    assert fact_visible_in_stream("direct", stream) is True


@pytest.mark.parametrize("origin", ["group", "legacy", "???", None])
@pytest.mark.parametrize("stream", ["group", "direct", "desktop"])
def test_group_legacy_unknown_always_visible(origin: str | None, stream: str) -> None:
    assert fact_visible_in_stream(origin, stream) is True


def test_origin_for_stream() -> None:
    assert origin_kind_for_stream("group") == "group"
    assert origin_kind_for_stream("direct") == "direct"
    assert origin_kind_for_stream("desktop") == "direct"


def test_upgrade_only_direct_to_group() -> None:  # 55
    assert upgraded_origin("direct", "group") == "group"
    assert upgraded_origin("group", "direct") == "group"
    assert upgraded_origin("legacy", "group") == "legacy"
    assert upgraded_origin("legacy", "direct") == "legacy"
    assert upgraded_origin("direct", "direct") == "direct"
    assert upgraded_origin("group", "group") == "group"
