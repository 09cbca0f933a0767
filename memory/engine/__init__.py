"""The retrieval engine of Memory Console: pure functions, no Django, no I/O.

Submodules (import the one you need; nothing is imported eagerly so that e.g.
``memory.engine.decay`` does not load jieba):

* :mod:`.decay` — forgetting curve, ``due_at``, reinforcement, hysteresis, lexical score;
* :mod:`.tokenize` — jieba words + CJK bigrams, safe FTS5 ``MATCH`` expressions;
* :mod:`.similarity` — near-duplicate fact detection;
* :mod:`.scoring` — ``blend_score``, dense fusion, pool percentile cut;
* :mod:`.quantize` — SQ8 blobs, int8 cosine, resident :class:`~.quantize.Int8Matrix`;
* :mod:`.pagerank` — personalised PageRank with a wall-clock deadline;
* :mod:`.spreading` — association spreading (memory + concept graph), short-term activation;
* :mod:`.scope` — visibility of facts per stream kind;
* :mod:`.metrics` — nDCG@k, recall@k;
* :mod:`.tuning` — tunable-parameter whitelist, validation, trace reconciliation;
* :mod:`.extraction` — parsing of extraction / summary model output.

No module of this package may import Django (enforced by ``tests/engine``).
"""

from __future__ import annotations

__all__ = [
    "decay",
    "tokenize",
    "similarity",
    "scoring",
    "quantize",
    "pagerank",
    "spreading",
    "scope",
    "metrics",
    "tuning",
    "extraction",
]
