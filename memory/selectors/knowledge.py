"""Knowledge search: lexical candidates fused with the resident vector index."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Count, Q, QuerySet

from memory import backends
from memory.engine import decay
from memory.engine.scoring import (
    fused_relevance,
)
from memory.models import ImportBatch, Knowledge
from memory.search import lexical
from memory.search.vector_index import knowledge_index
from memory.selectors._common import _query_q8

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnowledgeHit:
    id: int
    content: str
    score: float
    lexical: float
    cosine: float | None = None
    source: str = ""


def search_knowledge(*, query: str, limit: int = 5, query_embedding: Any = None) -> list[KnowledgeHit]:
    """Knowledge search: FTS candidates ∪ nearest vectors of the resident int8 index.

    Lexical relevance (``score(bm25, 1.0)``) is fused with the cosine when both
    vectors exist; knowledge never decays, so retention is fixed at 1.
    Read-only (hit counting is the caller's choice, see ``touch_knowledge``).
    """
    if limit < 1:
        return []
    match = lexical.match_for("knowledge_fts", query)
    if not match:  # no searchable term (empty, punctuation): nothing to look for, not even densely
        return []
    lex = {int(i): float(b) for i, b in lexical.knowledge_candidates(match, limit=limit * 3)}
    q8 = _query_q8(query_embedding)
    cos: dict[int, float] = {}
    if q8 is not None:
        try:
            for kid, c in knowledge_index().top_k(q8, limit * 3):
                cos[int(kid)] = float(c)
            missing = [i for i in lex if i not in cos]
            if missing:
                cos.update(knowledge_index().cosines_for(q8, missing))
        except ValueError:  # query of another dimension than the stored vectors: lexical stands
            logger.warning("knowledge vector search failed; lexical ranking kept", exc_info=True)
            cos = {}
        dense_only = [i for i in cos if i not in lex]
        if dense_only:  # their lexical score too (the resident index scores any row)
            lex.update(lexical.knowledge_bm25(match, dense_only))
    if not lex and not cos:
        return []
    ids = list(dict.fromkeys([*lex, *cos]))
    scored = []
    for kid in ids:
        b = lex.get(kid)
        rel_lex = decay.score(b, 1.0) if b is not None else 0.0
        c = cos.get(kid)
        rel = fused_relevance(rel_lex, c) if c is not None else rel_lex
        scored.append((rel, rel_lex, c, kid))
    scored.sort(key=lambda x: -x[0])
    top = scored[:limit]
    wanted = [kid for *_, kid in top]
    with connection.cursor() as cur:  # plain SQL: no ORM compile per search
        cur.execute(f"SELECT id, content, source FROM knowledge WHERE id IN ({backends.in_placeholders(wanted)})", wanted)
        rows = {kid: (content, source) for kid, content, source in cur.fetchall()}
    return [
        KnowledgeHit(id=kid, content=rows[kid][0], score=rel, lexical=rl, cosine=c, source=rows[kid][1])
        for rel, rl, c, kid in top
        if kid in rows
    ]


# --- the console's knowledge pages ----------------------------------------------------------------------


def knowledge_list() -> QuerySet[Knowledge]:
    """Every knowledge row, newest first, with its import batch (vectors and tokens left unread)."""
    return Knowledge.objects.select_related("import_batch").order_by("-id").defer("embedding", "embedding_q8", "tokens")


def import_batches(*, limit: int = 50) -> list[ImportBatch]:
    """The newest import batches that still hold knowledge or are running, each with ``live`` (its rows)."""
    return list(
        ImportBatch.objects.annotate(live=Count("knowledge")).filter(Q(live__gt=0) | Q(status=ImportBatch.Status.RUNNING))
        .order_by("-created_at", "-id")[:limit]
    )
