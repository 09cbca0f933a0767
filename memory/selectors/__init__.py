"""Every reusable read of the memory layers: recall, search, conflicts, spreading, the pages' lists and counts.

Selectors never change memory. The one exception the seed asks for is the
``memory_fact_scope_blocked`` observation event, written only when
``events=True`` (the console's playground passes ``False``); and
:func:`message_vectors` stores the vectors it had to compute (a cache of the
message text, so each message is embedded at most once).

One module per area, their public names re-exported here (callers write
``from memory import selectors; selectors.recall_facts_in_scope(...)``):

- ``messages``: L1 — working memory, pending counts, message search and vectors, stream lists;
- ``facts``: L3 — fact recall in scope, the dense channel, the fused ranking, the fact pages' search;
- ``conflicts``: slot-conflict groups (keys, members, groups for review);
- ``episodes``: L2 — episode recall by cue, the newest episodes, episode lists;
- ``knowledge``: knowledge search, the knowledge list and import batches;
- ``graph``: short-term activation, memory-graph and concept-graph spreading, the drawn subgraph;
- ``overview``: the dashboard's counts, recent events and jobs;
- ``persons``: the privacy pages (persons, forget samples, API tokens).
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
    episode_batches,
    episode_cues,
    episode_list,
    episodes_with_counts,
    recall_episodes,
    recent_episodes,
    recent_episodes_read,
    summary_skip_reasons,
)
from memory.selectors.facts import (
    SCOPE_BLOCKED,
    DenseScope,
    ScopedFact,
    any_fact_vector,
    dense_fact_candidates,
    dense_scope,
    dense_scope_read,
    fact_cosines,
    fact_coverages,
    fact_kinds,
    match_facts,
    merge_dense_candidates,
    rank_facts,
    rank_recalled_facts,
    recall_facts_across_persons,
    recall_facts_in_scope,
    scope_blocked_payload,
    supersede_chain,
    top_facts,
    valid_fact_cosines,
)
from memory.selectors.graph import (
    CONCEPT_HOLDERS_CACHED,
    CONCEPT_MAP_MIN,
    DenseSubgraph,
    Spreading,
    SpreadItem,
    densest_subgraph,
    node_edges,
    node_of,
    node_refs,
    node_retentions,
    node_rows,
    node_texts,
    resident_node_texts,
    short_term_activation,
    spread,
)
from memory.selectors.knowledge import (
    KnowledgeHit,
    import_batches,
    knowledge_list,
    search_knowledge,
)
from memory.selectors.messages import (
    MESSAGE_DENSE_SCAN,
    MESSAGE_POOL,
    filter_messages,
    latest_message_id,
    message_count_after,
    message_vectors,
    message_vectors_read,
    messages_after,
    oldest_pending,
    pending_count,
    pending_counts,
    recent_speakers,
    recent_speakers_read,
    search_messages,
    stream_rows,
    stream_speakers,
    working_memory,
    working_memory_read,
)
from memory.selectors.overview import (
    at_a_glance,
    edge_stats,
    extraction_cursors,
    layer_counts,
    recent_events,
    recent_jobs,
    stream_queues,
    vector_coverage,
)
from memory.selectors.persons import (
    api_tokens,
    broad_token_count,
    forget_samples,
    persons_by_id,
    search_persons,
    streams_by_id,
)

__all__ = [
    "CONCEPT_HOLDERS_CACHED",
    "CONCEPT_MAP_MIN",
    "ConflictGroup",
    "DenseScope",
    "DenseSubgraph",
    "KnowledgeHit",
    "MESSAGE_DENSE_SCAN",
    "MESSAGE_POOL",
    "RecalledEpisode",
    "SCOPE_BLOCKED",
    "ScopedFact",
    "SpreadItem",
    "Spreading",
    "any_fact_vector",
    "api_tokens",
    "at_a_glance",
    "broad_token_count",
    "conflict_group_keys",
    "conflict_groups",
    "conflict_members",
    "dense_fact_candidates",
    "dense_scope",
    "dense_scope_read",
    "densest_subgraph",
    "edge_stats",
    "episode_batches",
    "episode_cues",
    "episode_list",
    "episodes_with_counts",
    "extraction_cursors",
    "fact_cosines",
    "fact_coverages",
    "fact_kinds",
    "filter_messages",
    "forget_samples",
    "import_batches",
    "knowledge_list",
    "latest_message_id",
    "layer_counts",
    "match_facts",
    "merge_dense_candidates",
    "message_count_after",
    "message_vectors",
    "message_vectors_read",
    "messages_after",
    "node_edges",
    "node_of",
    "node_refs",
    "node_retentions",
    "node_rows",
    "node_texts",
    "oldest_pending",
    "pending_count",
    "pending_counts",
    "persons_by_id",
    "rank_facts",
    "rank_recalled_facts",
    "recall_episodes",
    "recall_facts_across_persons",
    "recall_facts_in_scope",
    "recent_episodes",
    "recent_episodes_read",
    "recent_events",
    "recent_jobs",
    "recent_speakers",
    "recent_speakers_read",
    "resident_node_texts",
    "scope_blocked_payload",
    "search_knowledge",
    "search_messages",
    "search_persons",
    "short_term_activation",
    "spread",
    "stream_queues",
    "stream_rows",
    "stream_speakers",
    "streams_by_id",
    "summary_skip_reasons",
    "supersede_chain",
    "top_facts",
    "valid_fact_cosines",
    "vector_coverage",
    "working_memory",
    "working_memory_read",
]
