"""Reads of the privacy pages: persons, the rows a forget would touch, API tokens."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db.models import Q, QuerySet

from memory.models import ApiToken, Episode, Fact, Message, Person, Stream

if TYPE_CHECKING:  # typing only: memory.privacy.forget writes, a selector never imports it
    from memory.privacy.forget import ForgetPlan


def search_persons(query: str = "") -> QuerySet[Person]:
    """Persons newest first; with a ``query``, those whose name or an identity (id, name) contains it."""
    rows = Person.objects.order_by("-id")
    if query:
        rows = rows.filter(
            Q(display_name__icontains=query) | Q(identities__external_id__icontains=query)
            | Q(identities__display_name__icontains=query)
        ).distinct()
    return rows


def persons_by_id(ids: Iterable[int]) -> dict[int, Person]:
    return Person.objects.in_bulk(list(ids))


def streams_by_id(ids: Iterable[int]) -> dict[int, Stream]:
    return Stream.objects.in_bulk(list(ids))


def forget_samples(plan: ForgetPlan, *, limit: int) -> dict[str, list[tuple[int, str]]]:
    """The first ``limit`` rows (by id) of each kind a forget plan touches, with their text."""

    def take(model: type[Message] | type[Fact] | type[Episode], ids: list[int], column: str) -> list[tuple[int, str]]:
        return list(model.objects.filter(pk__in=ids[:limit]).order_by("id").values_list("id", column))

    return {
        "messages": take(Message, plan.messages, "content"),
        "redacted_messages": take(Message, plan.redacted_messages, "content"),
        "facts": take(Fact, plan.facts, "content"),
        "episodes": take(Episode, plan.episodes, "summary"),
        "redacted_episodes": take(Episode, plan.redacted_episodes, "summary"),
    }


def api_tokens() -> QuerySet[ApiToken]:
    """Every API token, live ones first, newest first (the hash is never read)."""
    return ApiToken.objects.order_by("revoked_at", "-id").defer("token_hash")


def broad_token_count() -> int:
    """Live tokens with every scope (the console asks for them to be narrowed)."""
    live = ApiToken.objects.filter(revoked_at__isnull=True).values_list("scopes", flat=True)
    return sum(1 for scopes in live if "admin" in (scopes or []))
