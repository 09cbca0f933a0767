"""L3 reads: fact recall in scope, the dense channel, the fused ranking; the fact pages' search and history."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
from django.conf import settings
from django.db.models import Q, QuerySet

from memory import backends
from memory.engine import decay, tokenize, when
from memory.engine.background import background_of, generic_words
from memory.engine.context import ConversationQuery, shown_key, weighted_max_at
from memory.engine.quantize import cosine_q8_many, cosine_q8_matrix, quantize_vector
from memory.engine.scope import SCOPE_ALL, fact_visible_in_stream
from memory.engine.scoring import (
    Gate,
    QueryMass,
    RankCandidate,
    gate,
    is_reference_profile,
    rank,
    share_held,
)
from memory.engine.tokenize import bigrams, words
from memory.models import Fact, FactState
from memory.search import background, lexical, read_ahead
from memory.selectors._common import _overrides, _private_in_group, _query_q8
from memory.selectors.told import told_for, told_knobs
from memory.services import emit_event


@dataclass(frozen=True)
class ScopedFact:
    id: int
    person_id: int
    kind: str
    content: str
    slot: str
    origin_kind: str
    retention: float
    score: float
    lexical_relevance: float
    bm25: float | None
    half_life_hours: float
    active: bool
    cosine: float | None = None
    relevance: float | None = None  # fused relevance when a cosine was used
    source: str = "lexical"  # lexical | dense
    coverage: float | None = None  # share of the query's achievable IDF mass it matches
    rarest: bool = False  # holds the query's most specific word
    calibrated: float | None = None  # relevance as a share of the pool's best (reference ranking: relevance ** w)
    prior: float | None = None  # the retention term of the score
    eligible: bool = True  # False: the relevance gate held it back, it never enters the prompt
    margin: float | None = None  # cosine minus the query's background (the gate's dense side)
    gate: str = ""  # why the gate let it pass or held it back (memory.engine.scoring.Gate)
    timed: bool = False  # told inside the window the query names (the ranking's time_boost)
    told: float | None = None  # how much of the query where it was told holds (told_gain); None: not read
    source_message_id: int | None = None  # the message it was heard in (memory/selectors/told.py)

    def as_dict(self) -> dict[str, Any]:
        """The candidate as a turn records it in its pool (``Turn.pool``); :meth:`from_dict` reads it back.
        The ranking's terms (relevance, calibrated, prior, margin, gate) are not recorded: the confirm
        ranks the pool again (:func:`memory.recall.rank_pool`)."""
        return {
            "factId": self.id,
            "personId": self.person_id,
            "score": self.score,
            "lexical": self.lexical_relevance,
            "bm25": self.bm25,
            "retention": self.retention,
            "halfLife": self.half_life_hours,
            "kind": self.kind,
            "slot": self.slot,
            "content": self.content,
            "origin": self.origin_kind,
            "active": self.active,
            "cosine": self.cosine,
            "source": self.source,
            "coverage": self.coverage,
            "rarest": self.rarest,
            "eligible": self.eligible,
            "heardIn": self.source_message_id,
            "told": self.told,
        }

    @classmethod
    def from_dict(cls, item: Mapping[str, Any]) -> ScopedFact:
        """The candidate :meth:`as_dict` recorded (a turn's pool; keys added since an older turn was
        recorded read as their defaults)."""
        return cls(
            id=item["factId"], person_id=item["personId"], kind=item.get("kind", ""), content=item.get("content", ""),
            slot=item.get("slot", ""), origin_kind=item.get("origin", "legacy"), retention=item["retention"],
            score=item["score"], lexical_relevance=item["lexical"], bm25=item.get("bm25"),
            half_life_hours=item["halfLife"], active=item.get("active", True), cosine=item.get("cosine"),
            source=item.get("source", "lexical"), coverage=item.get("coverage"), rarest=item.get("rarest", False),
            eligible=item.get("eligible", True), source_message_id=item.get("heardIn"), told=item.get("told"),
        )

    def copy_with(self, **changes: Any) -> ScopedFact:
        """A copy with ``changes``: :func:`dataclasses.replace` without re-running ``__init__`` (a turn
        makes about seventy of these copies; this is several times cheaper)."""
        unknown = changes.keys() - self.__dict__.keys()
        if unknown:
            raise TypeError(f"ScopedFact has no field {', '.join(sorted(unknown))}")
        copy = object.__new__(ScopedFact)
        copy.__dict__.update(self.__dict__, **changes)
        return copy

    def terms(self) -> dict[str, Any]:
        """Every term of the score, as the ranking computed it (console, actions, traces)."""
        return {
            "factId": self.id, "bm25": self.bm25, "lexical": self.lexical_relevance, "coverage": self.coverage,
            "rarest": self.rarest,
            "cosine": self.cosine, "relevance": self.relevance, "calibrated": self.calibrated,
            "retention": self.retention, "prior": self.prior, "score": self.score, "eligible": self.eligible,
            "active": self.active, "source": self.source, "margin": self.margin, "gate": self.gate,
            "timed": self.timed, "told": self.told,
        }


def _visible_rows(
    rows: Sequence[lexical.FactRow], stream_kind: str, private_in_group: bool
) -> tuple[list[lexical.FactRow], int]:
    if stream_kind == SCOPE_ALL:
        return list(rows), 0
    kept = [r for r in rows if fact_visible_in_stream(r.origin_kind, stream_kind, private_in_group=private_in_group)]
    return kept, len(rows) - len(kept)


SCOPE_BLOCKED = "memory_fact_scope_blocked"


def scope_blocked_payload(stream_kind: str, blocked: int) -> dict[str, Any]:
    """The payload of a :data:`SCOPE_BLOCKED` event: ``blocked`` facts visibility held back in a ``stream_kind`` stream."""
    return {"streamKind": stream_kind, "blocked": blocked}


def _report_blocked(blocked: int, stream_kind: str, now: int, events: bool) -> None:
    if blocked and events:
        emit_event(SCOPE_BLOCKED, scope_blocked_payload(stream_kind, blocked), at=now)


def fact_coverages(
    ids: Sequence[int], query: str, *, tokens: Mapping[int, str] | None = None, scope: lexical.FactScope | None = None
) -> dict[int, tuple[float, bool]]:
    """Each fact's share of ``query``'s achievable IDF mass (:func:`scoring.idf_coverage`) and
    whether it holds the query's most specific word (:func:`scoring.holds_rarest`).

    The query's information is its words (jieba, English analysed) less the generic chat
    words of the gate's background bank (:func:`memory.engine.background.generic_words`): the
    index's CJK bigrams would count a long word several times, and "早上好" or "哈哈" say
    nothing about what to recall. A word is matched whole when the fact's FTS row holds it, and
    in part by the share of its bigrams that memory holds at all (jieba cuts a query's "这部手机"
    as 部手机 and the fact's "我的手机" as 手机: the fact holds the only part of 部手机 any memory
    does); its document frequency is the word's, else the rarest of its bigrams that occur. A word
    held in part counts only beside a word that memory holds whole: a line whose one link to memory
    is a fragment of a word (早上好 → 早上) asks for nothing. Frequencies come from the
    ``facts_fts`` vocabulary, or from ``scope`` (the facts the query ranks: :class:`lexical.FactScope`)
    when given. ``tokens`` — the facts' stored tokens when the caller read them already.
    """
    ids = list(dict.fromkeys(ids))
    generic = generic_words()
    qwords = [w for w in dict.fromkeys(words(query)) if w not in generic]
    if not ids or not qwords:
        return {i: (0.0, False) for i in ids}
    grams = {w: list(dict.fromkeys(bigrams(w))) for w in qwords}
    terms = list({*qwords, *(g for gs in grams.values() for g in gs)})
    raw = scope.document_frequencies(terms) if scope is not None else lexical.document_frequencies("facts_fts", terms)
    whole = {w: raw.get(w, 0) or (min(raw[g] for g in grams[w]) if grams[w] and all(raw.get(g, 0) > 0 for g in grams[w])
                                  else 0) for w in qwords}
    # a word's bigrams that some memory holds — counted only beside a word memory holds whole (早上好 → 早上 alone: none)
    known = {w: [g for g in grams[w] if raw.get(g, 0) > 0] if any(whole.values()) else [] for w in qwords}
    dfs = {w: whole[w] or (min(raw[g] for g in known[w]) if known[w] else 0) for w in qwords}
    n_docs = len(scope) if scope is not None else lexical.document_count("facts_fts")
    if tokens is None or any(i not in tokens for i in ids):
        tokens = dict(Fact.objects.filter(pk__in=ids).values_list("id", "tokens"))
    mass = QueryMass.of(dfs, n_docs)
    out = {}
    for i in ids:
        held = set((tokens.get(i) or "").split())
        credit = {w: 1.0 if w in held else share_held(known[w], held) for w in qwords}
        out[i] = (mass.credited(credit), mass.holds_rarest([w for w, c in credit.items() if c >= 1.0]))
    return out


class Cosines(dict):
    """``{fact id: cosine}`` with each fact's ``margins`` beside it: the cosine minus the query's
    background (:func:`memory.engine.background.background_of`, the bank of generic chat lines) —
    what the relevance gate reads. A fact has a margin only when the bank has vectors."""

    def __init__(self, cosines=(), margins=None):
        super().__init__(cosines)
        self.margins: dict[int, float] = dict(margins or {})

    def merged(self, other: Mapping[int, float]) -> Cosines:
        out = Cosines(self, self.margins)
        out.update(other)
        out.margins.update(getattr(other, "margins", {}))
        return out


def fact_cosines(ids: Sequence[int], query_vector: Any) -> Cosines:
    """Cosine (on SQ8) of each fact's vector with the query — the one place it is computed — and
    its margin over the query's background (:class:`Cosines`).

    ``query_vector`` is one vector or a :class:`~memory.engine.context.ConversationQuery`
    (the turn's vector and the recent messages' vectors, recency-weighted): then a fact's
    cosine is the weighted maximum over them, and its margin that of the query vector that
    gave it. Facts without a vector (or no query vector) are absent from the result.
    """
    ids = list(dict.fromkeys(ids))
    if _query_q8(query_vector) is None or not ids:
        return Cosines()
    blobs = dict(Fact.objects.filter(id__in=ids, embedding_q8__isnull=False).values_list("id", "embedding_q8"))
    return _cosines({i: blobs[i] for i in ids if i in blobs}, query_vector)


def valid_fact_cosines(ids: Sequence[int], query_vector: Any) -> tuple[set[int], Cosines]:
    """The facts among ``ids`` still valid (not superseded nor invalidated) and :func:`fact_cosines`
    of those — one read (a turn's confirm checks its pool and ranks it)."""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return set(), Cosines()
    with_vector = _query_q8(query_vector) is not None
    rows = Fact.objects.valid().filter(pk__in=ids).values_list("id", "embedding_q8" if with_vector else "id")
    valid = dict(rows)
    if not with_vector:
        return set(valid), Cosines()
    return set(valid), _cosines({i: valid[i] for i in ids if valid.get(i) is not None}, query_vector)


def _cosines(blobs: Mapping[int, bytes], query_vector: Any) -> Cosines:
    """:func:`fact_cosines` of SQ8 vectors already read (``{fact id: blob}``)."""
    found = list(blobs)
    stored = [bytes(blobs[i]) for i in found]
    if not stored:
        return Cosines()
    if isinstance(query_vector, ConversationQuery):
        matrix = cosine_q8_matrix([quantize_vector(v) for v in query_vector.vectors], stored)
        values, row_of = weighted_max_at(matrix, query_vector.weights)
        queries = query_vector.vectors
    else:
        values = cosine_q8_many(_query_q8(query_vector), stored)
        matrix, row_of = np.asarray(values)[None, :], np.zeros(len(found), dtype=np.int64)
        queries = np.asarray(query_vector, dtype=np.float32).ravel()
    backgrounds = background_of(queries, background.bank_vectors())
    if backgrounds is not None and getattr(query_vector, "wholes", ()):
        backgrounds[list(query_vector.wholes)] = backgrounds.max()  # a whole text: the background of its chattiest row
    out = Cosines()
    for k, (i, v) in enumerate(zip(found, values, strict=True)):
        if np.isnan(v):
            continue
        out[i] = float(v)
        if backgrounds is not None:  # the unweighted cosine of the query vector that gave it, over its background
            row = int(row_of[k])
            out.margins[i] = float(matrix[row, k]) - float(backgrounds[row])
    return out


def any_fact_vector(ids: Sequence[int]) -> bool:
    """Whether any of the facts has a (SQ8) vector: a query is worth embedding only then."""
    return Fact.objects.filter(pk__in=list(ids), embedding_q8__isnull=False).exists()


def query_window(text: str, now: int | None = None) -> tuple[int, int] | None:
    """The window (epoch ms) of the date ``text`` names, read in ``settings.TIME_ZONE``
    (:func:`memory.engine.when.query_window`; a day without a year: the last one up to ``now``);
    ``None`` when it names none."""
    return when.query_window(text, ZoneInfo(settings.TIME_ZONE), now)


def facts_dated_in(ids: Sequence[int], window: tuple[int, int] | None) -> frozenset[int]:
    """Those of ``ids`` whose fact was told (``created_at``) inside ``window`` — one read, only when
    the query names a date."""
    if window is None or not ids:
        return frozenset()
    rows = Fact.objects.filter(pk__in=list(dict.fromkeys(ids)), created_at__gte=window[0], created_at__lt=window[1])
    return frozenset(rows.values_list("id", flat=True))


def rank_facts(
    candidates: Sequence[ScopedFact],
    overrides: Mapping[str, Any] | None = None,
    *,
    cosines: Mapping[int, float] | None = None,
    window: tuple[int, int] | None = None,
    query: str = "",
    told_known: Mapping[int, float] | None = None,
) -> list[ScopedFact]:
    """Re-scored copies of ``candidates`` in :func:`memory.engine.scoring.rank` order.

    ``cosines`` (from :func:`fact_cosines`) replaces each candidate's cosine and margin when
    given; otherwise the ones it carries (if any) are used. ``window`` — the time the query names
    (:func:`query_window`): candidates told inside it are ``timed`` (the ranking's ``time_boost``).
    ``query`` — the text asked: candidates heard in a message whose neighbourhood matches it are
    ``told`` (:mod:`memory.selectors.told`; the ranking's ``told_gain``); "" leaves it out. Only the
    candidates the relevance gate lets pass are read for it (the term orders, it never admits: a held
    candidate's ``told`` stays ``None``); ``told_known`` — shares read already for this query (a turn's
    confirm takes its prepare's), read again for none of them.
    Every term of the score is kept on the copy; eligible candidates come first.
    """
    ov = _overrides(overrides)
    if cosines is not None:
        margins = getattr(cosines, "margins", {})
        cos_of, margin_of = (lambda c: cosines.get(c.id)), (lambda c: margins.get(c.id))
    else:
        cos_of, margin_of = (lambda c: c.cosine), (lambda c: c.margin)
    timed = facts_dated_in([c.id for c in candidates], window) if not is_reference_profile(ov) else frozenset()
    inputs = [
        RankCandidate(
            id=i, lexical=c.lexical_relevance, retention=c.retention, cosine=cos_of(c), coverage=c.coverage,
            active=c.active, rarest=c.rarest, margin=margin_of(c), timed=c.id in timed,
        )
        for i, c in enumerate(candidates)
    ]
    reasons = None
    told: dict[int, float] = {}
    if query and _told_wanted(candidates, ov):
        reasons = gate(inputs, ov)  # only the candidates it lets pass are read; rank reuses it
        told = _told_of(candidates, reasons, query, ov, told_known or {})
    if told:
        inputs = [replace(r, told=told[c.id]) if told.get(c.id) else r for r, c in zip(inputs, candidates, strict=True)]
    out = []
    for r in rank(inputs, ov, reasons=reasons):
        c = candidates[r.id]
        out.append(
            c.copy_with(cosine=r.cosine, relevance=r.relevance, score=r.score, calibrated=r.calibrated, prior=r.prior,
                        eligible=r.eligible, margin=r.margin, gate=r.gate, timed=r.timed, told=told.get(c.id))
        )
    return out


def _told_wanted(candidates: Sequence[ScopedFact], overrides: Mapping[str, Any]) -> bool:
    """Whether where a candidate was told can count: the profile weighs it and some candidate recorded it."""
    return (told_knobs(overrides)[0] > 0 and not is_reference_profile(overrides)
            and any(c.source_message_id for c in candidates))


def _told_of(
    candidates: Sequence[ScopedFact], reasons: Sequence[str], query: str, overrides: Mapping[str, Any],
    known: Mapping[int, float],
) -> dict[int, float]:
    """``{fact id: told share}`` of the candidates the gate lets pass (``reasons``: :func:`gate`'s) that were
    heard in a message (0.0 when their neighbourhood holds none of the query); ``known`` ones are not read again."""
    heard = {
        c.id: c.source_message_id
        for c, why in zip(candidates, reasons, strict=True)
        if c.source_message_id and why in Gate.PASSING
    }
    fresh = told_for({fid: m for fid, m in heard.items() if fid not in known}, query, overrides)
    return {fid: known[fid] if fid in known else fresh.get(fid, 0.0) for fid in heard}


def _score_rows(
    rows: Iterable[lexical.FactRow], now: int, overrides: Mapping[str, Any],
    coverages: Mapping[int, tuple[float, bool]] | None = None, query: str = "",
) -> list[ScopedFact]:
    facts = []
    for r in rows:
        fid, b = r.id, r.bm25
        ret = decay.retention(r.strength, r.updated_at, r.half_life_hours, now)
        lex = decay.relevance_from_bm25(b)
        facts.append(
            ScopedFact(
                id=fid, person_id=r.person_id, kind=r.kind, content=r.content, slot=r.slot, origin_kind=r.origin_kind,
                retention=ret, score=0.0, lexical_relevance=lex, bm25=b, half_life_hours=r.half_life_hours,
                active=bool(r.active), coverage=None if coverages is None else coverages.get(fid, (0.0, False))[0],
                rarest=False if coverages is None else coverages.get(fid, (0.0, False))[1],
                source_message_id=r.source_message_id,
            )
        )
    return rank_facts(facts, overrides, query=query)  # stable: bm25 order breaks ties


def _recall(
    *, person_ids: Sequence[int] | None, query: str, limit: int, now: int, stream_kind: str,
    private_in_group: bool | None, return_candidates: bool, overrides: Mapping[str, Any] | None, events: bool,
    blocked_counts: list[int] | None = None,
) -> list[ScopedFact]:
    if limit < 1:
        return []
    # Person-scoped queries rank only those persons' facts (the ``person`` column); a query
    # over every person is ranked by the resident index (memory/search/lexical_index.py).
    match = lexical.match_for("facts_fts", query)
    if not match:
        return []
    ov = _overrides(overrides)
    # a person-scoped query ranks by the statistics of the persons' facts (lexical.FactScope); the
    # reference ranking, and a query over every person, by the whole table's
    scope = lexical.fact_scope(person_ids) if person_ids is not None and not is_reference_profile(ov) else None
    if scope is not None:
        rows = lexical.scoped_fact_candidates(match, scope=scope, limit=limit * 3)
    else:
        rows = lexical.fact_candidates(match, person_ids=person_ids, limit=limit * 3)
    rows, blocked = _visible_rows(rows, stream_kind, _private_in_group(private_in_group))
    _report_blocked(blocked, stream_kind, now, events)
    if blocked and blocked_counts is not None:
        blocked_counts.append(blocked)
    known = {r.id: r.tokens for r in rows if r.tokens is not None}
    coverages = None if is_reference_profile(ov) else fact_coverages(
        [r.id for r in rows], query, tokens=known, scope=scope,
    )
    # a pool for a caller that ranks it again (a turn's union of queries) leaves where it was told to that ranking
    pool = _score_rows(rows, now, ov, coverages, query="" if return_candidates else query)
    return pool if return_candidates else [f for f in pool if f.eligible][:limit]


def recall_facts_in_scope(
    *,
    person_ids: Sequence[int] | None,
    query: str,
    limit: int = 6,
    now: int,
    stream_kind: str,
    private_in_group: bool | None = None,
    return_candidates: bool = False,
    overrides: Mapping[str, Any] | None = None,
    events: bool = True,
    blocked_counts: list[int] | None = None,
) -> list[ScopedFact]:
    """Lexical fact recall over the present persons (``None``: every person); read-only.

    One FTS query over ``person_id IN (...)`` (valid facts, frozen included),
    ``LIMIT limit*3``; visibility filtered before scoring; each candidate's
    relevance (``relevance_from_bm25``) and IDF coverage of the query go through
    :func:`rank_facts` (the engine's ``rank``); without ``return_candidates`` only
    eligible facts are returned. No person, no fact. What visibility held back is a
    :data:`SCOPE_BLOCKED` event with ``events``, and appended to ``blocked_counts`` when given.
    """
    persons = None if person_ids is None else list(dict.fromkeys(person_ids))
    if persons == []:
        return []
    return _recall(
        person_ids=persons, query=query, limit=limit, now=now, stream_kind=stream_kind,
        private_in_group=private_in_group, return_candidates=return_candidates, overrides=overrides, events=events,
        blocked_counts=blocked_counts,
    )


def recall_facts_across_persons(**options: Any) -> list[ScopedFact]:
    """:func:`recall_facts_in_scope` over every person's facts (the resident index ranks them), same options."""
    return recall_facts_in_scope(person_ids=None, **options)


def top_facts(
    *, person_id: int, limit: int = 8, now: int, stream_kind: str, private_in_group: bool | None = None
) -> list[ScopedFact]:
    """Strongest active valid facts of a person by current retention.

    ``stream_kind='all'`` bypasses visibility; only the extraction de-dup list may use it.
    """
    rows = list(
        Fact.objects.in_state(FactState.ACTIVE).filter(person_id=person_id).values_list(
            "id", "person_id", "kind", "content", "slot", "origin_kind", "strength", "half_life_hours", "updated_at"
        )
    )
    if stream_kind != SCOPE_ALL:
        pig = _private_in_group(private_in_group)
        visible = [r for r in rows if fact_visible_in_stream(r[5], stream_kind, private_in_group=pig)]
        _report_blocked(len(rows) - len(visible), stream_kind, now, True)
        rows = visible
    facts = []
    for fid, pid, kind, content, slot, origin, strength, half_life, updated_at in rows:
        ret = decay.retention(strength, updated_at, half_life, now)
        facts.append(
            ScopedFact(
                id=fid, person_id=pid, kind=kind, content=content, slot=slot, origin_kind=origin, retention=ret,
                score=ret, lexical_relevance=0.0, bm25=None, half_life_hours=half_life, active=True,
            )
        )
    facts.sort(key=lambda f: f.score, reverse=True)
    return facts[:limit]

@dataclass(frozen=True)
class DenseScope:
    """What one read of the present persons' valid facts gives a confirm (:func:`dense_scope`)."""

    candidates: list[ScopedFact]  # the dense channel: visible facts by cosine, top ``limit*3``
    valid: frozenset[int]  # every valid fact of the persons, with a vector or not
    cosines: Cosines  # the cosine (and margin) of every one of them with a vector
    tokens: dict[int, str]  # their stored lexical tokens


_DENSE_SCOPE_SQL = (  # the turn's hottest read: plain SQL (no ORM compile per call), vectors in binary
    "SELECT id, person_id, kind, content, slot, origin_kind, strength, half_life_hours, updated_at, active,"
    " embedding_q8, tokens, source_message_id FROM facts WHERE superseded_by IS NULL AND {persons}"
)


def dense_scope_read(person_ids: Sequence[int]) -> read_ahead.Read:
    """:func:`dense_scope`'s read of the persons' valid facts, to be sent with a confirm's others."""
    persons = list(dict.fromkeys(int(p) for p in person_ids))
    return read_ahead.Read(
        ("dense_scope", tuple(persons)),
        _DENSE_SCOPE_SQL.format(persons=f"person_id IN ({backends.in_placeholders(persons)})"), persons, binary=True,
    )


def turn_dense_scope_read(turn_id: int) -> read_ahead.Read:
    """:func:`dense_scope_read` of the persons a turn recorded as present, sent before the turn is
    read; :func:`memory.search.read_ahead.serve_from` files it under theirs once they are known."""
    persons = backends.in_subquery_sql("person_id", backends.json_ids_sql("turns", "present_person_ids"))
    return read_ahead.Read(("turn_dense_scope", int(turn_id)), _DENSE_SCOPE_SQL.format(persons=persons), [int(turn_id)],
                        binary=True)


def dense_scope(
    *,
    person_ids: Sequence[int],
    query_vector: Any,
    limit: int,
    now: int,
    stream_kind: str,
    private_in_group: bool | None = None,
    overrides: Mapping[str, Any] | None = None,
    shown: frozenset[str] = frozenset(),
    shown_out: list[int] | None = None,
) -> DenseScope | None:
    """The dense channel with what the confirm needs beside it, from one read of the persons' valid facts.

    Facts are few per person, so their vectors are read per call (no resident index). The
    candidates are :func:`dense_fact_candidates`'; ``valid``, ``cosines`` and ``tokens``
    cover every valid fact of the persons, so a pool drawn from the same persons is checked
    and ranked without reading its rows again (:func:`memory.recall.rank_pool`). ``None``
    without a query vector or persons. A fact whose text is one of the lines the conversation
    ``shown`` (:func:`memory.engine.context.shown_keys`) is no candidate: the top is taken among
    the others (the id of one that ranked above the cut appended to ``shown_out``).
    """
    persons = list(dict.fromkeys(person_ids))
    if _query_q8(query_vector) is None or not persons:
        return None
    rows = read_ahead.read(dense_scope_read(persons))
    cosines = _cosines({r[0]: r[10] for r in rows if r[10] is not None}, query_vector)
    valid = frozenset(r[0] for r in rows)
    tokens = {r[0]: r[11] or "" for r in rows}
    if limit < 1:
        return DenseScope([], valid, cosines, tokens)
    pig = _private_in_group(private_in_group)
    visible = [
        r for r in rows
        if r[0] in cosines and (stream_kind == SCOPE_ALL or fact_visible_in_stream(r[5], stream_kind, private_in_group=pig))
    ]
    ranked = []
    for cos, row in sorted(((cosines[r[0]], r) for r in visible), key=lambda x: -x[0]):
        if shown and shown_key(row[3]) in shown:  # (only the rows down to the cut are compared)
            if shown_out is not None:
                shown_out.append(row[0])
            continue
        ranked.append((cos, row[:10], row[12]))
        if len(ranked) == limit * 3:
            break
    out = []
    for cos, (fid, pid, kind, content, slot, origin, strength, half_life, updated_at, active), heard in ranked:
        ret = decay.retention(strength, updated_at, half_life, now)
        out.append(
            ScopedFact(
                id=fid, person_id=pid, kind=kind, content=content, slot=slot, origin_kind=origin, retention=ret,
                score=0.0, lexical_relevance=0.0, bm25=None, half_life_hours=half_life,
                active=bool(active), cosine=float(cos), source="dense", margin=cosines.margins.get(fid),
                source_message_id=heard,
            )
        )
    scored = {f.id: f for f in rank_facts(out, overrides)}
    return DenseScope([scored[f.id] for f in out], valid, cosines, tokens)  # cosine order: the merge appends so


def dense_fact_candidates(**options: Any) -> list[ScopedFact]:
    """Dense channel: valid facts of the present persons ranked by SQ8 cosine (top ``limit*3``).

    ``lexical_relevance`` is 0 here; :func:`merge_dense_candidates` back-computes the real
    bm25 and coverage. Scores are the engine's for this channel alone (:func:`dense_scope`,
    same options).
    """
    scope = dense_scope(**options)
    return [] if scope is None else scope.candidates


def merge_dense_candidates(
    pool: Sequence[ScopedFact], dense: Sequence[ScopedFact], *, query: str, tokens: Mapping[int, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[ScopedFact]:
    """Union by id (lexical pool first); dense-only hits get their real bm25 and coverage for ``query``.

    Facts that do not match lexically keep relevance 0 on the lexical side. ``tokens`` — the
    stored tokens of every valid fact of the persons (:class:`DenseScope`): their bm25 and
    coverage are then read against those facts' statistics, as the lexical pool's were
    (:class:`lexical.FactScope`; the reference ranking: the whole table's).
    """
    seen = {f.id for f in pool}
    extra = [f for f in dense if f.id not in seen]
    if not extra:
        return list(pool)
    match = lexical.match_for("facts_fts", query)
    if tokens is not None and not is_reference_profile(_overrides(overrides)):
        scope = lexical.FactScope(tokens)
        scores = scope.bm25(match)
        bm = {f.id: scores[f.id] for f in extra if f.id in scores}
        cov = fact_coverages([f.id for f in extra], query, tokens=tokens, scope=scope)
    else:
        bm = lexical.fact_bm25(match, [f.id for f in extra])
        cov = fact_coverages([f.id for f in extra], query, tokens=tokens)
    merged = list(pool)
    for f in extra:
        b = bm.get(f.id)
        merged.append(
            f.copy_with(
                bm25=b, lexical_relevance=decay.relevance_from_bm25(b) if b is not None else 0.0,
                coverage=cov.get(f.id, (0.0, False))[0], rarest=cov.get(f.id, (0.0, False))[1],
            )
        )
    return merged


def rank_recalled_facts(
    candidates: Sequence[ScopedFact],
    query_vector: Any,
    limit: int,
    overrides: Mapping[str, Any] | None = None,
) -> list[ScopedFact]:
    """Fused re-rank of a merged pool; returns re-scored copies, the eligible top ``limit``.

    Each candidate's cosine comes from :func:`fact_cosines` (when the query vector and
    the fact's SQ8 vector both exist), the score from the engine's ``rank``
    (:func:`rank_facts`): relevance ``0.4·lexical + 0.6·(cos+1)/2`` with a cosine, else
    the lexical one; the retention term is applied after fusion so the dense channel
    cannot bypass the forgetting curve. Without a query vector the lexical order stands.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    cosines = fact_cosines([c.id for c in candidates], query_vector) if query_vector is not None else {}
    ranked = rank_facts(candidates, overrides, cosines=cosines)
    return [f for f in ranked if f.eligible][:limit]


def fact_kinds() -> list[str]:
    """The distinct kinds of the stored facts, sorted (the fact table's kind filter)."""
    return list(Fact.objects.order_by("kind").values_list("kind", flat=True).distinct())


# --- the console's fact pages ----------------------------------------------------------------------


class FactRows:
    """Facts in a known order, read a slice at a time: each slice is one query for its own rows (a
    :class:`~django.core.paginator.Paginator` reads one page).

    The order may end in ``more`` rows that ``rest()`` settles (their ids, in order) only when a
    slice first reaches them; ``len()`` counts them without settling them.
    """

    def __init__(self, qs: QuerySet[Fact], ids: Sequence[int], *, more: int = 0,
                 rest: Callable[[], list[int]] | None = None) -> None:
        self.qs = qs
        self._ids = list(ids)
        self._more = more if rest is not None else 0
        self._rest = rest

    def __len__(self) -> int:
        return len(self._ids) + self._more

    def __getitem__(self, index: int | slice) -> Any:
        if not isinstance(index, slice):
            position = range(len(self))[index]  # IndexError past either end, as a list's
            return self[position: position + 1][0]
        positions = range(len(self))[index]
        if self._rest is not None and positions and max(positions) >= len(self._ids):
            self._ids += self._rest()[: self._more]
            self._rest, self._more = None, 0
        ids = [self._ids[p] for p in positions if p < len(self._ids)]
        found = {f.pk: f for f in self.qs.filter(pk__in=ids)} if ids else {}
        return [found[i] for i in ids if i in found]  # a row gone since the ids were read is left out

    def __iter__(self) -> Iterator[Fact]:
        return iter(self[:])


def match_facts(qs: QuerySet[Fact], query: str, *, ranked: Sequence[int] = (), limit: int = 200) -> FactRows:
    """The rows of a fact search: the ``ranked`` hits (the console's ``search_facts``, in their order)
    that pass ``qs``, then the other facts of ``qs`` whose text contains query terms (most
    terms first, newest on ties) — up to ``limit`` of them, chosen among the newest matches.

    Recall ranks only valid facts; this text match makes the frozen, invalidated and
    superseded ones findable too, so the search honours the state filter.

    Work follows the page shown (:class:`FactRows`): the hits that pass ``qs`` and how many
    others there are (a count that stops at ``limit``) are two small queries; the others' order
    is settled only for a page that shows them, and whole rows are read for the page alone.
    """
    ranked = list(dict.fromkeys(ranked))
    terms = [t for t in tokenize.query_terms(query) if t][:16]
    passing = set(qs.filter(pk__in=ranked).values_list("pk", flat=True)) if ranked else set()
    hits = [fact_id for fact_id in ranked if fact_id in passing]
    if not terms or limit <= 0:
        return FactRows(qs, hits)
    wanted = Q()
    for term in terms:
        wanted |= Q(content__icontains=term)
    matches = qs.filter(wanted).exclude(pk__in=ranked)
    # Chosen among the newest text matches, as many as the ranked hits and five times ``limit`` leave room for.
    room = len(ranked) + limit * 5 - len(hits)

    def matched(row: tuple[int, str]) -> int:
        text = row[1].lower()
        return sum(len(t) for t in terms if t in text)

    def others() -> list[int]:
        newest = list(matches.order_by("-updated_at", "-id").values_list("pk", "content")[:room])
        newest.sort(key=matched, reverse=True)  # stable: newest first
        return [fact_id for fact_id, _ in newest[:limit]]

    return FactRows(qs, hits, more=matches.order_by()[:limit].count(), rest=others)


def supersede_chain(fact: Fact, max_steps: int = 20) -> dict[str, list[Fact]]:
    """Older facts this one replaced (``before``) and the newer ones that replaced it (``after``).

    One query per step in each direction; chains are short (a slot changes a few times).
    """
    before: list[Fact] = []
    ids = [fact.pk]
    for _ in range(max_steps):
        older = list(Fact.objects.filter(superseded_by_id__in=ids).exclude(pk__in=ids).order_by("-id"))
        older = [f for f in older if f.pk != f.superseded_by_id and f not in before]
        if not older:
            break
        before.extend(older)
        ids = [f.pk for f in older]
    after: list[Fact] = []
    current = fact
    for _ in range(max_steps):
        if current.superseded_by_id in (None, current.pk):
            break
        nxt = Fact.objects.filter(pk=current.superseded_by_id).first()
        if nxt is None or nxt in after:
            break
        after.append(nxt)
        current = nxt
    return {"before": before, "after": after}
