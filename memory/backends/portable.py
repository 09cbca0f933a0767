"""SQL text that both backends accept, for the statements the project builds by hand."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence, Sized

from django.db import connection

#: where each lexical table's rows keep their indexed tokens: (rows' table, tokens column)
TOKEN_COLUMNS = {
    "facts_fts": ("facts", "tokens"),
    "cues_fts": ("episode_cues", "tokens"),
    "knowledge_fts": ("knowledge", "tokens"),
    "messages_fts": ("messages", "tokens"),
}

#: a fact candidate's columns (:class:`memory.search.lexical.FactRow`), its bm25 as ``{bm25}``
FACT_COLUMNS = (
    "f.id, {bm25}, f.person_id, f.kind, f.content, f.slot, f.origin_kind,"
    " f.strength, f.half_life_hours, f.updated_at, f.active, f.embedding_q8 IS NOT NULL"
)


def in_placeholders(values: Sized) -> str:
    """The placeholders of ``IN (…)`` for ``values``: ``%s,%s,…`` — ``NULL`` when there are none.

    PostgreSQL rejects an empty ``IN ()`` as a syntax error (SQLite accepts it); ``x IN (NULL)``
    holds for no row on both. Every ``IN`` list of parameters is built here, so an empty one
    cannot reach the server.
    """
    return ",".join(["%s"] * len(values)) or "NULL"


def ranked_fact_rows(
    batches: Iterable[Sequence[tuple[int, float]]], *, include_invalid: bool, limit: int, columns: str = FACT_COLUMNS
) -> list[tuple]:
    """Rows of ranked facts, in rank order, until ``limit``: ``columns`` (``f.id, {bm25}, …``) with the ranking's bm25.

    ``batches`` yields the ranking ``(id, bm25)`` batch by batch, best first; each batch is
    read with one ``id IN (…)`` query (superseded facts dropped unless ``include_invalid``)
    and no batch is asked for once ``limit`` rows are found. The one place fact rows are
    fetched for ranked ids (resident index, PostgreSQL postings).
    """
    rows: list[tuple] = []
    valid = "" if include_invalid else " AND f.superseded_by IS NULL"
    for batch in batches:
        if not batch:
            break
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT {columns.format(bm25='0')} FROM facts f WHERE f.id IN ({in_placeholders(batch)}){valid}",
                [fid for fid, _ in batch],
            )
            found = {r[0]: r for r in cur.fetchall()}
        rows += [(fid, b, *found[fid][2:]) for fid, b in batch if fid in found]
        if len(rows) >= limit:
            break
    return rows[:limit]


def chunks(ranked: Sequence[tuple[int, float]], limit: int) -> Iterator[Sequence[tuple[int, float]]]:
    """A whole ranking in batches for :func:`ranked_fact_rows` and PostgreSQL's cues (a batch covers ``limit``
    when few rows drop out)."""
    step = max(limit, 64)
    for start in range(0, len(ranked), step):
        yield ranked[start:start + step]


def cue_rows(hits: Sequence[tuple[int, float]]) -> list[tuple[int, int, float]]:
    """``(episode id, cue id, bm25)`` of ranked cue hits ``(cue id, bm25)``, in their order; cues of
    placeholder (unsummarized) episodes dropped."""
    if not hits:
        return []
    with connection.cursor() as cur:
        cur.execute(
            "SELECT c.id, c.episode_id FROM episode_cues c JOIN episodes e ON e.id = c.episode_id"
            f" WHERE c.id IN ({in_placeholders(hits)}) AND e.kind <> 'unsummarized'",
            [cid for cid, _ in hits],
        )
        episode_of = dict(cur.fetchall())
    return [(episode_of[cid], cid, b) for cid, b in hits if cid in episode_of]
