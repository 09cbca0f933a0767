"""Where a fact was told: how much of a query the conversation around the message a fact was heard in holds.

A fact is a paraphrase ("Caroline went to an LGBTQ support group") of something said ("I went to
a LGBTQ support group yesterday, it was so powerful"); a question is often asked in the words of
what was said, and of the lines around it, more than in the fact's. A fact that records its
message (``Fact.source_message``: the extractor's, or the bot's ``source_message_id``) is lifted
by how much of the query that message's neighbourhood holds — the ``told_window`` messages before
and after it in its stream, cut where a silence of ``context_gap_minutes`` ends the conversation:
the share of the query's informative IDF mass (its words less the generic chat words of the gate's
bank and the Chinese function words — 什么, 我们, 这个 … — that name nothing; IDF over every stored
message) that the neighbourhood's words hold, a word held in part by the share of its CJK pairs held
(as the gate reads a fact's coverage). The share is the query's own measure, not relative to other
candidates: a neighbourhood that holds only a common word of the question lifts little. The ranking adds ``told_gain`` times it (:func:`memory.engine.scoring.rank`);
it never lets a candidate past the gate.

Measured offline on LoCoMo before it was built (``python -m bench.eval_session_prior``, rule
"neighbourhood"): the turns around the evidence turn carry more than the session's summary.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection

from memory.backends import in_placeholders, is_postgresql
from memory.engine.background import FUNCTION_WORDS, generic_words
from memory.engine.context import DEFAULT_GAP_MINUTES
from memory.engine.scoring import DEFAULT_TOLD_GAIN, DEFAULT_TOLD_WINDOW, QueryMass, is_reference_profile, share_held
from memory.engine.tokenize import bigrams, words
from memory.search import lexical

#: How many messages one statement looks the neighbours of up.
_SOURCES_A_STATEMENT = 200


def told_knobs(overrides: Mapping[str, Any]) -> tuple[float, int, int]:
    """``(told_gain, told_window, the conversation's silence in ms)`` of a profile."""
    gain = float(overrides.get("told_gain", DEFAULT_TOLD_GAIN))
    window = int(overrides.get("told_window", DEFAULT_TOLD_WINDOW))
    gap = int(float(overrides.get("context_gap_minutes", DEFAULT_GAP_MINUTES)) * 60_000)
    return gain, window, gap


def told_for(sources: Mapping[int, int], query: str, overrides: Mapping[str, Any]) -> dict[int, float]:
    """:func:`told_shares` under a profile: nothing under the reference ranking or with ``told_gain`` 0."""
    gain, window, gap = told_knobs(overrides)
    if gain <= 0 or not query or not sources or is_reference_profile(overrides):
        return {}
    return told_shares(sources, query, window=window, gap_ms=gap)


def told_shares(sources: Mapping[int, int], query: str, *, window: int, gap_ms: int) -> dict[int, float]:
    """``{fact id: share}`` for the facts of ``sources`` (``{fact id: the message it was heard in}``)
    whose message's neighbourhood holds some of ``query``'s informative words: the share of their
    IDF mass it holds, in ``(0, 1]``.

    Reads: the messages and their neighbours' tokens (:func:`neighbourhoods`; the candidates' rows
    carried their source ids already) and the query words' document
    frequencies among all messages (:func:`memory.search.lexical.message_statistics`).
    """
    generic = generic_words()
    qwords = [w for w in dict.fromkeys(words(query)) if w not in generic and w not in FUNCTION_WORDS]
    if not sources or not qwords:
        return {}
    grams = {w: list(dict.fromkeys(bigrams(w))) for w in qwords}
    raw, n_docs = lexical.message_statistics([*qwords, *(g for gs in grams.values() for g in gs)])
    # a word's document frequency is its own, else the rarest of its pairs when memory holds them all
    dfs = {w: raw.get(w) or (min(raw[g] for g in grams[w]) if grams[w] and all(g in raw for g in grams[w]) else 0)
           for w in qwords}
    mass = QueryMass.of(dfs, n_docs)
    if mass.total <= 0:
        return {}
    known = {w: [g for g in grams[w] if g in raw] for w in qwords}  # a word's pairs that some message holds
    shares: dict[int, float] = {}
    for message_id, held in neighbourhoods(sorted(set(sources.values())), window, gap_ms).items():
        shares[message_id] = mass.credited({w: 1.0 if w in held else share_held(known[w], held) for w in qwords})
    # a message that is gone lifts nothing
    return {fid: shares[m] for fid, m in sources.items() if shares.get(m, 0.0) > 0}


#: The messages of a stream within ``window`` of each of the given ones (both ends' ids found in the
#: (stream, id) index; a side with fewer than ``window`` messages reaches the stream's end).
_NEIGHBOURS_SQL = (
    "SELECT s.id, m.id, m.created_at, m.tokens FROM messages s JOIN messages m ON m.stream_id = s.stream_id"
    " AND m.id >= COALESCE((SELECT x.id FROM messages x WHERE x.stream_id = s.stream_id AND x.id < s.id"
    " ORDER BY x.id DESC LIMIT 1 OFFSET %s), 0)"
    " AND m.id <= COALESCE((SELECT x.id FROM messages x WHERE x.stream_id = s.stream_id AND x.id > s.id"
    " ORDER BY x.id LIMIT 1 OFFSET %s), 9223372036854775807)"
    " WHERE s.id {ids}"
)


def neighbourhoods(message_ids: Sequence[int], window: int, gap_ms: int) -> dict[int, set[str]]:
    """``{message id: the tokens of its neighbourhood}`` of the messages still stored: its own and those
    of up to ``window`` messages of its stream before and after it, stopping at a silence longer than
    ``gap_ms``. One statement (:data:`_NEIGHBOURS_SQL`) a :data:`_SOURCES_A_STATEMENT` messages."""
    rows: dict[int, list[tuple[int, int, str]]] = defaultdict(list)  # message → itself and its neighbours
    for start in range(0, len(message_ids), _SOURCES_A_STATEMENT):
        chunk = [int(m) for m in message_ids[start:start + _SOURCES_A_STATEMENT]]
        # PostgreSQL: one array parameter, so the statement's text is the same whatever the count (prepared once)
        ids, params = ("= ANY(%s)", [chunk]) if is_postgresql() else (f"IN ({in_placeholders(chunk)})", chunk)
        with connection.cursor() as cur:
            if window < 1:
                cur.execute(f"SELECT id, id, created_at, tokens FROM messages WHERE id {ids}", params)
            else:
                cur.execute(_NEIGHBOURS_SQL.format(ids=ids), [window - 1, window - 1, *params])
            for source, message_id, created_at, tokens in cur.fetchall():
                rows[source].append((message_id, created_at, tokens or ""))
    out: dict[int, set[str]] = {}
    for source, near in rows.items():
        near.sort()
        own = next((r for r in near if r[0] == source), None)
        if own is None:
            continue
        held = set(own[2].split())
        for side in ([r for r in near if r[0] < source][::-1], [r for r in near if r[0] > source]):  # nearest first
            last = own[1]
            for _message_id, created_at, tokens in side:
                if abs(created_at - last) > gap_ms:
                    break
                held.update(tokens.split())
                last = created_at
        out[source] = held
    return out
