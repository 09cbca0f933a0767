"""Reads of the memory layers: recall, search, conflicts and spreading, one module per area.

Selectors never change memory. The one exception the seed asks for is the
``memory_fact_scope_blocked`` observation event, written only when
``events=True`` (the console's playground passes ``False``); and
:func:`message_vectors` stores the vectors it had to compute (a cache of the
message text, so each message is embedded at most once).

The public names of the area modules are re-exported here: callers write
``from memory import selectors; selectors.recall_facts_in_scope(...)``.
"""
from __future__ import annotations

from memory.selectors.conflicts import (
    ConflictGroup,
    conflict_group_keys,
    conflict_groups,
    conflict_members,
)
from memory.selectors.episodes import (
    RecalledEpisode,
    recall_episodes,
    recent_episodes,
)
from memory.selectors.facts import (
    ScopedFact,
    dense_fact_candidates,
    fact_cosines,
    fact_coverages,
    merge_dense_candidates,
    rank_facts,
    rank_recalled_facts,
    recall_facts_across_persons,
    recall_facts_in_scope,
    top_facts,
)
from memory.selectors.graph import (
    CONCEPT_HOLDERS_CACHED,
    CONCEPT_MAP_MIN,
    Spreading,
    SpreadItem,
    node_retentions,
    node_texts,
    resident_node_texts,
    short_term_activation,
    spread,
)
from memory.selectors.knowledge import (
    KnowledgeHit,
    search_knowledge,
)
from memory.selectors.messages import (
    MESSAGE_DENSE_SCAN,
    MESSAGE_POOL,
    filter_messages,
    latest_message_id,
    message_count_after,
    message_vectors,
    messages_after,
    oldest_pending,
    pending_count,
    pending_counts,
    recent_speakers,
    search_messages,
    stream_rows,
    working_memory,
)
from memory.selectors.overview import (
    at_a_glance,
    edge_stats,
    extraction_cursors,
    layer_counts,
    stream_queues,
    vector_coverage,
)

__all__ = [
    "CONCEPT_HOLDERS_CACHED",
    "CONCEPT_MAP_MIN",
    "ConflictGroup",
    "KnowledgeHit",
    "MESSAGE_DENSE_SCAN",
    "MESSAGE_POOL",
    "RecalledEpisode",
    "ScopedFact",
    "SpreadItem",
    "Spreading",
    "at_a_glance",
    "conflict_group_keys",
    "conflict_groups",
    "conflict_members",
    "dense_fact_candidates",
    "edge_stats",
    "extraction_cursors",
    "fact_cosines",
    "fact_coverages",
    "filter_messages",
    "latest_message_id",
    "layer_counts",
    "merge_dense_candidates",
    "message_count_after",
    "message_vectors",
    "messages_after",
    "node_retentions",
    "node_texts",
    "oldest_pending",
    "pending_count",
    "pending_counts",
    "rank_facts",
    "rank_recalled_facts",
    "recall_episodes",
    "recall_facts_across_persons",
    "recall_facts_in_scope",
    "recent_episodes",
    "recent_speakers",
    "resident_node_texts",
    "search_knowledge",
    "search_messages",
    "short_term_activation",
    "spread",
    "stream_queues",
    "stream_rows",
    "top_facts",
    "vector_coverage",
    "working_memory",
]
