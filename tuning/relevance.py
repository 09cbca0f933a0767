"""Relevance labels: which facts a reviewer says a recorded turn should have had in its prompt.

A label is one (turn, fact) judgement — relevant or not — with who and when. A reviewer labels
the candidates of a turn on its inspector page and may add a fact the ranking never offered
(``added``): it must be a fact of a person present at the turn that the turn's stream may
show (a fact heard in private is never brought up in a group unless ``PRIVATE_FACTS_IN_GROUP``).
Every change is a row of the tuning journal (:class:`tuning.models.TuningOperation`, with what
it replaced). Labels go with their turn or fact (foreign keys: forgetting a fact, a person or a
stream deletes them), and retention never prunes a labelled turn
(:func:`memory.pipeline.retention.register_kept_turns`, from the app config).

Labels are what trace-replay evaluation scores against where a turn has them (the *human*
pool), never mixed with the prompt facts of unlabelled turns (the *weak* pool):
:mod:`tuning.evaluation`.

Export and import (``/api/v1/tuning/labels``) use one JSON shape::

    {"labels": [{"turn": 12, "fact": 34, "relevant": true, "user": "…", "at": 1700000000000}, …]}

An import checks every entry before storing any (unknown turn or fact, a fact of a person who
was not present, a fact the stream may not show, a duplicate entry: :class:`LabelInputError`
lists them all) and then writes them in one transaction, each as the importing user.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q

from memory import selectors
from memory.engine.scope import fact_visible_in_stream
from memory.models import Fact, Turn
from memory.services import now_ms
from tuning.models import RelevanceLabel, TuningOperation

#: An import takes at most this many labels (a request's body stays bounded).
MAX_IMPORT = 20_000
Op = TuningOperation.Op


class LabelError(ValueError):
    """A label was refused; ``status`` is the HTTP status the API answers: 404 an unknown turn or fact,
    409 a fact the turn cannot have (a person who was not present, a private fact in a group), 422 malformed."""

    def __init__(self, message: str, *, status: int = 409, field: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.field = field


class LabelInputError(LabelError):
    """An import was refused as a whole; ``errors`` = ``[{"index", "field", "message", "status"}]``, nothing
    stored. Its status is the most basic of its errors' (malformed 422, then unknown 404, then refused 409)."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        statuses = {e.get("status", 422) for e in errors}
        status = next((s for s in (422, 404, 409) if s in statuses), min(statuses))
        super().__init__(f"{len(errors)} 条标注有误，一条也没有保存：{errors[0]['message']}", status=status)
        self.errors = errors


@dataclass(frozen=True)
class TurnScope:
    """What decides which facts may be labelled for a turn."""

    turn_id: int
    person_ids: frozenset[int]
    stream_kind: str


def _scope(turn: Any) -> TurnScope:
    return TurnScope(turn.pk, frozenset(int(p) for p in turn.present_person_ids or []), turn.stream_kind)


def _turn(turn_id: int) -> Turn:
    turn = Turn.objects.only("id", "present_person_ids", "stream_kind", "pool").filter(pk=turn_id).first()
    if turn is None:
        raise LabelError(f"回合 #{turn_id} 不存在", status=404, field="turn")
    return turn


def refusal(scope: TurnScope, fact: Any | None, fact_id: int) -> str:
    """Why ``fact`` cannot be labelled for the turn, or ``""`` when it can."""
    if fact is None:
        return f"事实 #{fact_id} 不存在"
    if fact.person_id not in scope.person_ids:
        return f"事实 #{fact_id} 属于人物 #{fact.person_id}，这一轮对话里没有这个人"
    if not fact_visible_in_stream(fact.origin_kind, scope.stream_kind, private_in_group=settings.PRIVATE_FACTS_IN_GROUP):
        return f"事实 #{fact_id} 是私聊里听来的，这一轮在群聊里，机器人不会用它"
    return ""


def _pool_ids(turn: Any) -> set[int]:
    return {int(e["factId"]) for e in turn.pool or [] if isinstance(e, dict) and isinstance(e.get("factId"), int)}


def _journal(op: str, *, turn_id: int, fact_id: int, user: str, at: int, relevant: bool | None,
             prev: RelevanceLabel | None) -> TuningOperation:
    return TuningOperation(
        at=at, user=user[:150], op=op, turn_id=turn_id, fact_id=fact_id,
        detail={"relevant": relevant, "prev": None if prev is None else {"relevant": prev.relevant, "user": prev.user,
                                                                           "at": prev.at}},
    )


def set_label(*, turn_id: int, fact_id: int, relevant: bool | None, user: str, at: int | None = None
              ) -> RelevanceLabel | None:
    """Label one fact of a turn relevant (``True``), not relevant (``False``) or clear it (``None``).

    Refused (:class:`LabelError`, nothing written) for an unknown turn or fact (404), a fact of a
    person not present at the turn or one the stream may not show (409). Journalled; setting the
    label it already has writes nothing.
    """
    at = now_ms() if at is None else at
    with transaction.atomic():
        turn = _turn(turn_id)
        fact = Fact.objects.only("id", "person_id", "origin_kind").filter(pk=fact_id).first()
        why = refusal(_scope(turn), fact, fact_id)
        if why:
            raise LabelError(why, status=404 if fact is None else 409, field="fact")
        prev = RelevanceLabel.objects.select_for_update().filter(turn_id=turn_id, fact_id=fact_id).first()
        if relevant is None:
            if prev is not None:
                prev.delete()
                _journal(Op.UNLABEL, turn_id=turn_id, fact_id=fact_id, user=user, at=at, relevant=None,
                         prev=prev).save()
            return None
        if prev is not None and prev.relevant == relevant:
            return prev
        label, _ = RelevanceLabel.objects.update_or_create(
            turn_id=turn_id, fact_id=fact_id,
            defaults={"relevant": relevant, "added": fact_id not in _pool_ids(turn), "user": user[:150], "at": at},
        )
        _journal(Op.LABEL, turn_id=turn_id, fact_id=fact_id, user=user, at=at, relevant=relevant, prev=prev).save()
    return label


def _entry_errors(index: int, entry: Any) -> tuple[tuple[int, int, bool] | None, list[dict[str, Any]]]:
    if not isinstance(entry, Mapping):
        return None, [{"index": index, "field": "", "message": "每条标注需要是对象：{turn, fact, relevant}", "status": 422}]
    errors = []
    values = {}
    for name, kind in (("turn", int), ("fact", int), ("relevant", bool)):
        value = entry.get(name)
        ok = isinstance(value, bool) if kind is bool else isinstance(value, int) and not isinstance(value, bool)
        if not ok or (kind is int and value < 1):
            need = "true 或 false" if kind is bool else "正整数"
            errors.append({"index": index, "field": name, "message": f"第 {index + 1} 条：{name} 需要{need}", "status": 422})
        values[name] = value
    return (None if errors else (values["turn"], values["fact"], values["relevant"])), errors


def import_labels(entries: Sequence[Any], *, user: str, at: int | None = None) -> dict[str, int]:
    """Store many labels at once (all or nothing); ``{"created", "updated", "unchanged"}``.

    Each entry is ``{"turn", "fact", "relevant"}`` (other keys — ``user``, ``at`` of an export — are
    ignored: an import is the importing user's judgement, stored as of now). Every entry is checked
    first; any refused entry refuses the whole import (:class:`LabelInputError` lists each one).
    """
    at = now_ms() if at is None else at
    if len(entries) > MAX_IMPORT:
        raise LabelInputError([{"index": MAX_IMPORT, "field": "", "message": f"一次最多导入 {MAX_IMPORT} 条标注",
                                "status": 422}])
    parsed: list[tuple[int, int, bool]] = []
    errors: list[dict[str, Any]] = []
    seen: dict[tuple[int, int], int] = {}
    for i, entry in enumerate(entries):
        values, problems = _entry_errors(i, entry)
        errors += problems
        if values is None:
            continue
        key = values[:2]
        if key in seen:
            errors.append({"index": i, "field": "fact", "status": 409,
                           "message": f"第 {i + 1} 条：回合 #{key[0]} 的事实 #{key[1]} 在第 {seen[key] + 1} 条已经出现过"})
            continue
        seen[key] = i
        parsed.append(values)
    with transaction.atomic():
        turns = {t.pk: t for t in _chunked(Turn.objects.only("id", "present_person_ids", "stream_kind", "pool"),
                                           {t for t, _f, _r in parsed})}
        facts = {f.pk: f for f in _chunked(Fact.objects.only("id", "person_id", "origin_kind"), {f for _t, f, _r in parsed})}
        for turn_id, fact_id, _relevant in parsed:
            index = seen[(turn_id, fact_id)]
            turn = turns.get(turn_id)
            if turn is None:
                errors.append({"index": index, "field": "turn", "message": f"第 {index + 1} 条：回合 #{turn_id} 不存在",
                               "status": 404})
                continue
            why = refusal(_scope(turn), facts.get(fact_id), fact_id)
            if why:
                errors.append({"index": index, "field": "fact", "message": f"第 {index + 1} 条：{why}",
                               "status": 404 if fact_id not in facts else 409})
        if errors:
            raise LabelInputError(sorted(errors, key=lambda e: e["index"]))
        existing = {
            (label.turn_id, label.fact_id): label
            for chunk in _id_chunks(sorted(turns))
            for label in RelevanceLabel.objects.filter(turn_id__in=chunk)
        }
        counts = {"created": 0, "updated": 0, "unchanged": 0}
        create, update, journal = [], [], []
        for turn_id, fact_id, relevant in parsed:
            prev = existing.get((turn_id, fact_id))
            if prev is not None and prev.relevant == relevant:
                counts["unchanged"] += 1
                continue
            added = fact_id not in _pool_ids(turns[turn_id])
            if prev is None:
                create.append(RelevanceLabel(turn_id=turn_id, fact_id=fact_id, relevant=relevant, added=added,
                                             user=user[:150], at=at))
                counts["created"] += 1
            else:
                journal_prev = RelevanceLabel(relevant=prev.relevant, user=prev.user, at=prev.at)
                prev.relevant, prev.user, prev.at = relevant, user[:150], at
                update.append(prev)
                counts["updated"] += 1
                journal.append(_journal(Op.IMPORT, turn_id=turn_id, fact_id=fact_id, user=user, at=at,
                                        relevant=relevant, prev=journal_prev))
                continue
            journal.append(_journal(Op.IMPORT, turn_id=turn_id, fact_id=fact_id, user=user, at=at, relevant=relevant,
                                    prev=None))
        RelevanceLabel.objects.bulk_create(create, batch_size=500)
        RelevanceLabel.objects.bulk_update(update, ["relevant", "user", "at"], batch_size=500)
        TuningOperation.objects.bulk_create(journal, batch_size=500)
    return counts


def _id_chunks(ids: Sequence[int], size: int = 500) -> Iterable[list[int]]:
    for start in range(0, len(ids), size):
        yield list(ids[start:start + size])


def _chunked(queryset: Any, ids: Iterable[int]) -> Iterable[Any]:
    """Rows of ``queryset`` with these primary keys (SQLite bounds a statement's parameters)."""
    for chunk in _id_chunks(sorted(ids)):
        yield from queryset.filter(pk__in=chunk)


def export_labels(*, turn_ids: Iterable[int] | None = None) -> dict[str, Any]:
    """Every label (or those of ``turn_ids``) as the import reads them, oldest turn first."""
    rows = RelevanceLabel.objects.order_by("turn_id", "fact_id")
    if turn_ids is not None:
        rows = rows.filter(turn_id__in=list(turn_ids))
    return {
        "labels": [
            {"turn": turn, "fact": fact, "relevant": relevant, "added": added, "user": user, "at": at}
            for turn, fact, relevant, added, user, at in rows.values_list("turn_id", "fact_id", "relevant", "added",
                                                                           "user", "at")
        ],
        "exported_at": datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    }


# --------------------------------------------------------------------------- #
# Reads
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class TurnLabels:
    """A turn's labels: the facts judged relevant and those judged not, by id."""

    relevant: frozenset[int]
    irrelevant: frozenset[int]

    @property
    def count(self) -> int:
        return len(self.relevant) + len(self.irrelevant)


def labels_of(turn_ids: Iterable[int]) -> dict[int, TurnLabels]:
    """``{turn id: TurnLabels}`` of the turns that have any label."""
    relevant: dict[int, set[int]] = defaultdict(set)
    irrelevant: dict[int, set[int]] = defaultdict(set)
    for chunk in _id_chunks(sorted(set(turn_ids))):
        for turn, fact, is_relevant in RelevanceLabel.objects.filter(turn_id__in=chunk).values_list(
            "turn_id", "fact_id", "relevant"
        ):
            (relevant if is_relevant else irrelevant)[turn].add(fact)
    return {t: TurnLabels(frozenset(relevant[t]), frozenset(irrelevant[t])) for t in set(relevant) | set(irrelevant)}


def turn_labels(turn_id: int) -> dict[int, RelevanceLabel]:
    """A turn's labels by fact id."""
    return {label.fact_id: label for label in RelevanceLabel.objects.filter(turn_id=turn_id)}


def labelled_turn_ids(*, relevant_only: bool = False) -> Any:
    """A queryset of the ids of labelled turns (with at least one *relevant* label: ``relevant_only``)."""
    rows = RelevanceLabel.objects.all()
    if relevant_only:
        rows = rows.filter(relevant=True)
    return rows.values("turn_id").distinct()


@dataclass(frozen=True)
class Progress:
    turns: int  # turns with any label
    turns_with_relevant: int  # turns a fit can learn from
    labels: int
    relevant: int
    reviewers: int


def progress() -> Progress:
    """How far labelling has come ("37 turns labelled"): two aggregate queries."""
    totals = RelevanceLabel.objects.aggregate(
        labels=Count("id"), relevant=Count("id", filter=Q(relevant=True)), reviewers=Count("user", distinct=True),
        turns=Count("turn_id", distinct=True),
    )
    with_relevant = RelevanceLabel.objects.filter(relevant=True).values("turn_id").distinct().count()
    return Progress(turns=totals["turns"], turns_with_relevant=with_relevant, labels=totals["labels"],
                    relevant=totals["relevant"], reviewers=totals["reviewers"])


def addable_facts(turn: Any, query: str, *, limit: int = 10) -> list[selectors.ScopedFact]:
    """Facts a reviewer may add to a turn's labels: the present persons' facts the stream may show that
    match ``query`` (the bot's own lexical search over them, valid facts, frozen included), at the turn's time."""
    if not query.strip() or not turn.present_person_ids:
        return []
    found = selectors.recall_facts_in_scope(
        person_ids=[int(p) for p in turn.present_person_ids], query=query, limit=limit, now=int(turn.at),
        stream_kind=turn.stream_kind, return_candidates=True, events=False,
    )
    return found[: limit]


def recent_operations(*, limit: int = 50, ops: Sequence[str] | None = None) -> list[TuningOperation]:
    rows = TuningOperation.objects.order_by("-at", "-id")
    if ops:
        rows = rows.filter(op__in=list(ops))
    return list(rows[:limit])
