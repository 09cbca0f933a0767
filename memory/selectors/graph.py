"""Association reads: short-term activation, memory-graph and concept-graph spreading."""
from __future__ import annotations

import threading
from array import array
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import ahocorasick
from django.db import connection
from django.db.models import Q

from memory import backends
from memory.engine import decay
from memory.engine import spreading as sp
from memory.engine.spreading import ConceptGraph, SpreadResult
from memory.engine.spreading import spread as engine_spread
from memory.models import Episode, Fact, Knowledge, MemoryEdge, MemoryNode
from memory.search import activation as shared_activation
from memory.search import lexical_index, residency
from memory.search.changes import ChangeFeed
from memory.selectors._common import _overrides
from memory.services import CONCEPT_GRAPH_REVISION, emit_event


def short_term_activation():
    """The short-term activation (10 min time constant): shared in Redis by every process (memory/search/activation.py)."""
    return shared_activation.activation()


class _FactorsAt:
    """``node → factor`` at ``now`` for the engine, with the batched ``many`` it prefers and the largest
    factor (``most``), so a spread asks only for the factors of the hits it loads."""

    most = sp.ACTIVATION_MOST

    def __init__(self, activation, now: int) -> None:
        self.activation, self.now = activation, now

    def __call__(self, node: int) -> float:
        return self.activation.factor(node, self.now)

    def many(self, nodes: Iterable[int]) -> dict[int, float]:
        return self.activation.factors(nodes, self.now)


# The active edges touching a frontier (each id list twice), and the memory nodes at their ends.
_EDGES_SQL = ("SELECT source_id, target_id, strength FROM memory_edges WHERE active AND source_id IN ({ids})"
              " UNION ALL SELECT source_id, target_id, strength FROM memory_edges WHERE active AND target_id IN ({ids})")
_EDGE_ENDS_SQL = ("SELECT target_id FROM memory_edges WHERE active AND source_id IN ({ids})"
                  " UNION SELECT source_id FROM memory_edges WHERE active AND target_id IN ({ids})")


def _expand(frontier: set[int]) -> list[tuple[int, int, float]]:
    if not frontier:
        return []
    ids = list(frontier)
    with connection.cursor() as cur:
        cur.execute(_EDGES_SQL.format(ids=backends.in_placeholders(ids)), ids + ids)
        return cur.fetchall()


# A memory node joined to the row it points at (missing rows give NULLs). The key is NULL for the other two
# kinds, so each node reads one table: with ``n.ref_kind = 'fact' AND f.id = n.ref_id`` both backends looked
# the node's ref id up in all three (PostgreSQL filters the kind after the join), reading three rows' pages
# to keep one — most of a spread's reads in a store larger than memory.
_NODE_JOINS = (
    " LEFT JOIN facts f ON f.id = CASE WHEN n.ref_kind = 'fact' THEN n.ref_id END"
    " LEFT JOIN episodes e ON e.id = CASE WHEN n.ref_kind = 'episode' THEN n.ref_id END"
    " LEFT JOIN knowledge k ON k.id = CASE WHEN n.ref_kind = 'knowledge' THEN n.ref_id END"
)
# The columns a spread reads of the nodes it meets: their retention inputs and a fact's text (on the row
# the retention reads). An episode or a knowledge row is only checked to exist — its primary key answers,
# not its row (PostgreSQL: an index-only scan) — and its text is read for the hits alone
# (:meth:`_SpreadRows.fill_texts`): a spread meets tens to hundreds of nodes, mostly knowledge rows a
# concept reached, and keeps four.
_NODE_COLUMNS = "n.id, n.ref_kind, n.ref_id, f.strength, f.updated_at, f.half_life_hours, f.active, e.id, k.id, f.content"
_TEXT_COLUMNS = "n.id, n.ref_kind, n.ref_id, coalesce(f.content, e.summary, k.content)"


class _SpreadRows:
    """What one spread has read of the memory nodes it met: retention and ``(kind, ref id, text)``.

    One query finds the seeds' nodes with their texts (was three); a retention query
    (same joins as :func:`node_retentions`) reads a fact's text with it, and one more reads the
    texts of the hits that are episodes or knowledge. (Reading the far ends' rows in the edge query too
    was measured slower on both backends: it joins once per edge, not per node. On
    PostgreSQL :meth:`expand` sends them as a second statement of the same round trip.)
    """

    def __init__(self, now: int) -> None:
        self.now = now
        self.retention: dict[int, float | None] = {}
        self.texts: dict[int, tuple[str, int, str]] = {}

    def _keep(self, row: tuple) -> None:
        node, kind, ref, strength, updated_at, half_life, active, episode, knowledge, fact_text = row
        value = None
        if kind == "fact" and strength is not None and active:
            value = decay.retention(strength, updated_at, half_life, self.now)
        elif (kind == "episode" and episode is not None) or (kind == "knowledge" and knowledge is not None):
            value = 1.0
        self.retention[node] = value
        if kind == "fact":
            self.texts[node] = (kind, ref, fact_text or "")

    def fill_texts(self, nodes: Iterable[int]) -> None:
        """Read the texts of ``nodes`` not known yet (one query; a node whose row is gone gets ``""``)."""
        ids = [n for n in dict.fromkeys(nodes) if n not in self.texts]
        if not ids:
            return
        with connection.cursor() as cur:
            cur.execute(f"SELECT {_TEXT_COLUMNS} FROM memory_nodes n{_NODE_JOINS}"
                        f" WHERE n.id IN ({backends.in_placeholders(ids)})", ids)
            for node, kind, ref, text in cur.fetchall():
                self.texts[node] = (kind, ref, text or "")

    def expand(self, frontier: set[int]) -> list[tuple[int, int, float]]:
        """:func:`_expand`; on PostgreSQL the rows of the nodes at the edges' ends come in the same
        round trip (a second statement, pipelined), so the engine's next :meth:`retentions` sends
        nothing: two round trips fewer in a spread of 2 hops, with the same hits. The second
        statement is its own snapshot: an end it does not see is read by :meth:`load` as before."""
        if not frontier or not backends.is_postgresql():
            return _expand(frontier)
        ids = list(frontier)
        marks = backends.in_placeholders(ids)
        edges, ends = backends.postgresql.read_together([
            (_EDGES_SQL.format(ids=marks), ids + ids, False),
            (f"SELECT {_NODE_COLUMNS} FROM memory_nodes n{_NODE_JOINS} WHERE n.id IN ({_EDGE_ENDS_SQL.format(ids=marks)})",
             ids + ids, False),
        ])
        for row in ends:
            if row[0] not in self.retention:
                self._keep(row)
        return edges

    def load(self, nodes: Iterable[int]) -> None:
        """Read the rows of ``nodes`` not read yet (one query)."""
        ids = [n for n in nodes if n not in self.retention]
        if not ids:
            return
        with connection.cursor() as cur:
            cur.execute(
                f"SELECT {_NODE_COLUMNS} FROM memory_nodes n{_NODE_JOINS} WHERE n.id IN ({backends.in_placeholders(ids)})",
                ids,
            )
            for row in cur.fetchall():
                self._keep(row)
        for node in ids:
            self.retention.setdefault(node, None)

    def retentions(self, nodes: set[int]) -> dict[int, float | None]:
        """:func:`node_retentions` of ``nodes``, reading only the rows not read yet."""
        self.load(nodes)
        return {n: self.retention[n] for n in nodes}

    def seeds(self, seeds: Sequence[tuple[str, int, float]]) -> dict[tuple[str, int], int]:
        """The memory node of each seed row (one query), their rows remembered."""
        by_kind: dict[str, set[int]] = defaultdict(set)
        for kind, ref, _rel in seeds:
            by_kind[kind].add(int(ref))
        where, params = [], []
        for kind, ids in by_kind.items():
            where.append(f"(n.ref_kind = %s AND n.ref_id IN ({backends.in_placeholders(ids)}))")
            params += [kind, *ids]
        if not where:
            return {}
        with connection.cursor() as cur:
            cur.execute(f"SELECT {_NODE_COLUMNS}, e.summary, k.content FROM memory_nodes n{_NODE_JOINS}"
                        f" WHERE {' OR '.join(where)} ORDER BY n.id", params)
            rows = cur.fetchall()
        for *row, summary, content in rows:
            self._keep(tuple(row))
            node, kind, ref, fact_text = row[0], row[1], row[2], row[-1]
            self.texts[node] = (kind, ref, fact_text or summary or content or "")
        return {(kind, ref): node for node, kind, ref, *_rest in rows}


def _node_rows(nodes: Iterable[int], columns: str) -> list[tuple]:
    """One query joining memory nodes to the rows they point at (missing rows give NULLs)."""
    ids = list(nodes)
    if not ids:
        return []
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT n.id, n.ref_kind, n.ref_id, {columns} FROM memory_nodes n{_NODE_JOINS}"
            f" WHERE n.id IN ({backends.in_placeholders(ids)})",
            ids,
        )
        return cur.fetchall()


def node_retentions(nodes: set[int], now: int) -> dict[int, float | None]:
    """Fact: decayed retention if it exists and is active; episode/knowledge: 1.0 if it exists."""
    out: dict[int, float | None] = {n: None for n in nodes}
    rows = _node_rows(nodes, "f.strength, f.updated_at, f.half_life_hours, f.active, e.id, k.id")
    for node, kind, _ref, strength, updated_at, half_life, active, episode, knowledge in rows:
        if kind == "fact" and strength is not None and active:
            out[node] = decay.retention(strength, updated_at, half_life, now)
        elif (kind == "episode" and episode is not None) or (kind == "knowledge" and knowledge is not None):
            out[node] = 1.0
    return out


def node_texts(nodes: Iterable[int]) -> dict[int, tuple[str, int, str]]:
    """Memory node → ``(kind, ref id, text)``; a missing row has empty text."""
    rows = _node_rows(nodes, "f.content, e.summary, k.content")
    return {node: (kind, ref, fc or es or kc or "") for node, kind, ref, fc, es, kc in rows}


# Only the best-ranked max(CONCEPT_MAP_MIN, limit) reached concepts are mapped back to memory
# nodes (the reference maps every reached concept): a few top-4 lists in a hundred differ from
# mapping every concept, at half the CPU (BENCHMARKS.md, spreading).
CONCEPT_MAP_MIN = 4
CONCEPT_HOLDERS_CACHED = 4096  # concept names whose holder lists the resident node texts remember


def _fold_for_scan(text: str | None) -> str:
    # NUL separates the texts in the resident blob; a concept name never holds one
    return (text or "").casefold().replace("\x00", " ")


def _all_node_texts(ids: Sequence[int] | None = None) -> list[tuple[int, str]]:
    """``(memory node id, casefolded text)`` of every registered node (or of ``ids``), by id.

    The text is the one the reference maps concepts with: fact content, episode
    summary, knowledge content; a node whose row is gone has no text and holds nothing.
    """
    where, params = "", []
    if ids is not None:
        if not ids:
            return []
        where, params = f" WHERE n.id IN ({backends.in_placeholders(ids)})", list(ids)
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT n.id, coalesce(f.content, e.summary, k.content) FROM memory_nodes n{_NODE_JOINS}{where} ORDER BY n.id",
            params,
        )
        return [(node, _fold_for_scan(text)) for node, text in cur.fetchall() if text]


NODE_REVISION_KEY = "lexical_revision:memory_nodes"  # bumped when a memory node is deleted (migration 0026)


class _NodeTexts:
    """The casefolded texts of every registered memory node, resident per process.

    Concept spreading maps a concept back to *every* registered node whose text
    contains the concept's name (casefold substring, docs/REFERENCE.md §8). The
    texts live in one NUL-separated string, so finding a name's holders is one
    C-speed ``str.find`` pass over the whole corpus (no FTS tokenisation can miss a
    substring, and episodes are searched by their summaries); holder lists are
    remembered per name until the corpus changes.

    Freshness, as the resident lexical index does it: new nodes come from the change
    log (:mod:`memory.search.changes`, in any commit order) and are appended (remembered
    holder lists are extended by scanning only the appended texts); a deleted node
    (``lexical_revision:memory_nodes``) or a deleted or re-tokenised fact or knowledge
    row (``lexical_revision:*``) rebuilds it. Summaries and contents are never edited in
    place. Used only outside a transaction (a rolled-back node id could be reused);
    inside one, :func:`_nodes_containing` scans the rows directly.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.rebuilds = 0
        self._clear()

    def _clear(self) -> None:
        self._state: tuple | None = None
        self._feed = ChangeFeed("memory_nodes", NODE_REVISION_KEY)
        self._in_order = True  # the blob holds its texts in node id order
        self._last = 0
        self._blob = ""
        self._starts = array("q")  # offset of each text in the blob (ascending)
        self._nodes = array("q")  # its memory node id
        self._holders: dict[str, list[int]] = {}

    def _add(self, rows: list[tuple[int, str]]) -> int:
        """Append ``rows`` to the blob; return the index of the first appended text."""
        first = len(self._starts)
        parts = []
        offset = len(self._blob)
        for node, text in rows:
            self._starts.append(offset + 1)
            self._nodes.append(node)
            parts.append("\x00" + text)
            offset += len(text) + 1
            if node < self._last:
                self._in_order = False  # a node committed after one with a larger id (PostgreSQL)
            self._last = max(self._last, node)
        self._blob += "".join(parts)
        return first

    def _scan(self, needle: str, first: int = 0) -> list[int]:
        """Nodes (from text index ``first`` on) whose text contains ``needle``, in blob order."""
        if not needle or first >= len(self._starts):
            return []
        blob, starts, out = self._blob, self._starts, []
        at = blob.find(needle, starts[first])
        while at != -1:
            k = bisect_right(starts, at) - 1
            out.append(self._nodes[k])
            if k + 1 >= len(starts):
                break
            at = blob.find(needle, starts[k + 1])
        return out

    def refresh(self, row_revisions: tuple | None = None) -> None:
        """Bring the texts up to the committed nodes; ``row_revisions`` — the facts' and knowledge's
        lexical revisions when the caller read them already (a spread reads them with the concept
        graph's, :func:`_spread_revisions`)."""
        with self._lock:
            poll = self._feed.poll()
            state = (poll.revision, *(row_revisions or _spread_revisions()[1:]))
            if state == self._state and not poll.rebuild:
                if poll.row_ids:
                    first = self._add(_all_node_texts(poll.row_ids))  # some may have no row: no text
                    for name, holders in self._holders.items():
                        holders.extend(self._scan(name, first))
                        if not self._in_order:
                            holders.sort()
                return
            self._clear()
            revision = self._feed.start()  # the log's position before the rows are read: nothing falls in between
            self._add(_all_node_texts())
            self._state = (revision, *state[1:])  # a change since either read only rebuilds once more
            self._prewarm(_concepts.fresh().ids)
            self.rebuilds += 1
            residency.settle()

    def _prewarm(self, names: Iterable[str]) -> None:
        """The holder lists of the concept graph's names (up to ``CONCEPT_HOLDERS_CACHED``) from one
        Aho-Corasick pass over the texts, so no spread pays a first scan for a concept of the graph
        (a scan per name reads the whole corpus: ~2.5 ms per name on the bench store). The lists are
        :meth:`_scan`'s: each node holding a name once, in blob order (then id order)."""
        wanted = [name for name in dict.fromkeys(names) if name.strip() and "\x00" not in name]
        wanted = wanted[:CONCEPT_HOLDERS_CACHED]
        if not wanted or not self._starts:
            return
        automaton = ahocorasick.Automaton()
        for name in wanted:
            automaton.add_word(name, name)
        automaton.make_automaton()
        found: dict[str, list[int]] = {name: [] for name in wanted}
        last: dict[str, int] = {}
        starts, nodes = self._starts, self._nodes
        for end, name in automaton.iter(self._blob):
            k = bisect_right(starts, end - len(name) + 1) - 1
            if last.get(name) != k:  # one entry per text holding the name
                last[name] = k
                found[name].append(nodes[k])
        if not self._in_order:
            for holders in found.values():
                holders.sort()
        self._holders.update(found)

    def holders(self, name: str) -> list[int]:
        """Every loaded node whose casefolded text contains ``name`` (already casefolded)."""
        with self._lock:
            found = self._holders.get(name)
            if found is None:
                found = self._scan(name) if self._in_order else sorted(self._scan(name))  # in id order
                if len(self._holders) >= CONCEPT_HOLDERS_CACHED:
                    self._holders.clear()
                self._holders[name] = found
            return found

    def reset(self) -> None:
        with self._lock:
            self._clear()


_node_texts = _NodeTexts()


def resident_node_texts(row_revisions: tuple | None = None) -> _NodeTexts | None:
    """The fresh resident node texts, or ``None`` inside a transaction / when resident indexes are off."""
    if not lexical_index.resident_enabled():
        return None
    _node_texts.refresh(row_revisions)
    return _node_texts


def _nodes_containing(concepts: set[str], row_revisions: tuple | None = None) -> dict[str, list[int]]:
    """Every registered memory node (fact, episode, knowledge) whose text contains each concept.

    The reference rule (docs/REFERENCE.md §8): ``concept.casefold()`` is a substring of the node's
    text (fact content / episode summary / knowledge content) casefolded. No cap:
    every holder gets its share. Outside a transaction the resident node texts
    answer (one ``str.find`` pass per name, then remembered); inside one, the
    rows are read and scanned directly.
    """
    folded = {c: c.casefold() for c in concepts if c.strip() and "\x00" not in c}
    index = resident_node_texts(row_revisions)
    if index is not None:
        return {c: index.holders(f) for c, f in folded.items()}
    rows = _all_node_texts()
    return {c: [node for node, text in rows if f in text] for c, f in folded.items()}


class _ConceptCache:
    """The concept graph, resident per process and reloaded when its meta revision changes.

    ``services.add_knowledge`` bumps ``concept_graph_revision`` in the transaction that
    grows the graph; a spread then costs one tiny query instead of loading edges hop by hop.
    """

    def __init__(self) -> None:
        self.revision: str | None = None
        self.ids: dict[str, list[int]] = {}  # casefolded name -> concept ids
        self.lengths: list[int] = []  # distinct lengths of the casefolded names
        self.names: dict[int, str] = {}
        self.adjacency: dict[int, dict[int, float]] = {}

    def fresh(self, revision: str | None = None) -> _ConceptCache:
        """The graph as committed (``revision`` — its meta revision when the caller read it already)."""
        with connection.cursor() as cur:
            if revision is None:
                cur.execute("SELECT value FROM meta WHERE key = %s", [CONCEPT_GRAPH_REVISION])
                row = cur.fetchone()
                revision = row[0] if row else "0"
            if revision != self.revision:
                cur.execute("SELECT id, concept FROM knowledge_nodes")
                self.names = dict(cur.fetchall())
                ids: dict[str, list[int]] = defaultdict(list)
                for cid, name in self.names.items():
                    if name.strip():
                        ids[name.casefold()].append(cid)
                self.ids = dict(ids)
                self.lengths = sorted({len(name) for name in self.ids})
                adjacency: dict[int, dict[int, float]] = defaultdict(dict)
                cur.execute("SELECT source_id, target_id, strength FROM knowledge_edges")
                for a, b, w in cur.fetchall():
                    adjacency[a][b] = max(adjacency[a].get(b, 0.0), w)
                    adjacency[b][a] = max(adjacency[b].get(a, 0.0), w)
                self.adjacency = dict(adjacency)
                self.revision = revision
                residency.settle()
        return self


_concepts = _ConceptCache()


def _concepts_in(text: str, graph: _ConceptCache) -> set[int]:
    """Concepts whose casefolded name occurs in ``text`` (casefolded): the reference's seeding rule.

    Every substring of ``text`` of a length some name has is looked up (names are
    jieba words, a handful of lengths), so no concept list is scanned.
    """
    found: set[int] = set()
    size = len(text)
    for length in graph.lengths:
        if length > size:
            break
        for i in range(size - length + 1):
            ids = graph.ids.get(text[i:i + length])
            if ids:
                found.update(ids)
    return found


def _concept_graph(seed_texts: Mapping[int, str], hops: int, limit: int) -> ConceptGraph | None:
    """The part of the concept graph reachable from the seeds' concepts within ``hops``.

    The seed concepts are those whose casefolded name occurs in a seed text (looked
    up by the text's substrings, not by scanning every name); the engine applies the
    same rule within this bounded part. Normalising out-weights before bounding and
    re-normalising after it equals normalising the bounded part only, so handing
    over the bounded part is exact.
    """
    if not any(t.strip() for t in seed_texts.values()):
        return None
    concept_revision, *row_revisions = _spread_revisions()
    graph = _concepts.fresh(concept_revision)
    start: set[int] = set()
    for text in seed_texts.values():
        start |= _concepts_in(text.casefold(), graph)
    if not start:
        return None
    seen, frontier = set(start), set(start)
    for _ in range(hops):
        frontier = {n for node in frontier for n in graph.adjacency.get(node, {})} - seen
        if not frontier:
            break
        seen |= frontier
    edges = [(a, b, w) for a in seen for b, w in graph.adjacency.get(a, {}).items() if b in seen and a < b]
    return ConceptGraph(
        concepts={cid: graph.names[cid] for cid in seen}, edges=edges, seed_texts=seed_texts,
        nodes_containing=lambda names: _nodes_containing(names, tuple(row_revisions)),
        max_mapped=max(CONCEPT_MAP_MIN, limit),
    )


def _spread_revisions() -> tuple:
    """The concept graph's revision and the facts' and knowledge's lexical revisions, in one read."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT (SELECT value FROM meta WHERE key = %s),"
            " (SELECT value FROM meta WHERE key = 'lexical_revision:facts'),"
            " (SELECT value FROM meta WHERE key = 'lexical_revision:knowledge')",
            [CONCEPT_GRAPH_REVISION],
        )
        concept, facts, knowledge = cur.fetchone()
    return concept or "0", facts, knowledge


@dataclass(frozen=True)
class SpreadItem:
    node_id: int
    kind: str
    ref_id: int
    content: str
    score: float
    hops: int


@dataclass(frozen=True)
class Spreading:
    seeds: list[SpreadItem]
    hits: list[SpreadItem]
    fell_back: bool
    timed_out_graph: str | None
    elapsed_ms: float
    hops: int
    alpha: float


def spread(
    *,
    seeds: Sequence[tuple[str, int, float]],
    now: int,
    hops: int | None = None,
    limit: int = 4,
    alpha: float | None = None,
    activation=None,  # ShortTermActivation or memory.search.activation.SharedActivation
    events: bool = True,
    use_concepts: bool = True,
    timeout_seconds: float | None = None,
) -> Spreading:
    """Association spreading from ``(kind, ref_id, relevance)`` seeds; read-only.

    Personalised PageRank on the memory graph and on the concept graph, summed;
    a PPR timeout falls back to fixed-hop spreading and writes
    ``memory_ppr_timeout``. Hits below REVIVE retention are dropped.
    """
    ov = _overrides(None)
    hops = int(ov.get("ppr_hops", sp.HOPS)) if hops is None else hops
    alpha = float(ov.get("ppr_alpha", sp.PPR_ALPHA)) if alpha is None else alpha
    weights: dict[int, float] = {}
    rows = _SpreadRows(now)
    node_of = rows.seeds(seeds)
    for kind, ref, rel in seeds:
        node = node_of.get((kind, int(ref)))
        if node is not None:
            weights[node] = max(weights.get(node, 0.0), float(rel))
    # the seeds in node id order, as node_texts(weights) read them
    seed_info = {node: rows.texts[node] for node in sorted(weights)}
    concept = (
        _concept_graph({n: t for n, (_k, _r, t) in seed_info.items()}, hops, limit) if use_concepts and weights else None
    )

    def on_timeout(graph: str) -> None:
        if events:
            emit_event("memory_ppr_timeout", {"graph": graph}, at=now)

    factor: Callable[[int], float] | None = _FactorsAt(activation, now) if activation is not None else None
    result: SpreadResult = engine_spread(
        weights, hops=hops, limit=limit, expand=rows.expand, retention_of=rows.retentions,
        concept=concept, alpha=alpha, activation=factor, on_timeout=on_timeout,
        **({"timeout_seconds": timeout_seconds} if timeout_seconds else {}),
    )
    rows.load(h.node_id for h in result.hits)  # read already unless the PPR timed out
    rows.fill_texts(h.node_id for h in result.hits)
    texts = rows.texts
    hits = [
        SpreadItem(h.node_id, texts[h.node_id][0], texts[h.node_id][1], texts[h.node_id][2], h.score, h.hops)
        for h in result.hits
        if h.node_id in texts
    ]
    seeds_out = [SpreadItem(n, k, r, t, weights[n], 0) for n, (k, r, t) in seed_info.items()]
    return Spreading(
        seeds=seeds_out, hits=hits, fell_back=result.fell_back, timed_out_graph=result.timed_out_graph,
        elapsed_ms=result.elapsed_ms, hops=hops, alpha=alpha,
    )


# --- the console's association graph ----------------------------------------------------------------


@dataclass(frozen=True)
class DenseSubgraph:
    """The densest nodes of the memory graph and the edges among them (:func:`densest_subgraph`)."""

    degrees: list[tuple[int, int]]  # (memory node, degree), densest first, ties by node id
    edges: list[tuple[int, int, float, int, bool]]  # (source, target, strength, updated_at, active) among them
    connected: int  # nodes with at least one counted edge
    truncated: bool  # more connected nodes than were kept
    edge_total: int  # every edge, frozen included
    frozen_edges: int
    node_total: int  # every memory node, isolated included
    spread_runs: int  # ``memory_spread`` events


def densest_subgraph(*, limit: int, include_frozen: bool = False) -> DenseSubgraph:
    """The ``limit`` memory nodes with the most edges (active ones only unless ``include_frozen``)
    and the counted edges among them, with the graph's totals.

    Degrees are counted and ranked in SQL: the graph can hold far more edges than a page
    shows. Four queries: edge totals, ranked degrees, kept edges, node and spread counts.
    """
    active_only = "" if include_frozen else " WHERE active"
    with connection.cursor() as cur:
        cur.execute("SELECT COUNT(*), COALESCE(SUM(CASE WHEN active THEN 0 ELSE 1 END), 0) FROM memory_edges")
        edge_total, frozen = cur.fetchone()
        cur.execute(
            f"WITH deg AS (SELECT node, COUNT(*) AS d FROM (SELECT source_id AS node FROM memory_edges{active_only}"
            f" UNION ALL SELECT target_id FROM memory_edges{active_only}) AS ends GROUP BY node)"
            " SELECT node, d, (SELECT COUNT(*) FROM deg) FROM deg ORDER BY d DESC, node LIMIT %s",
            [limit + 1],
        )
        ranked = cur.fetchall()
        connected = ranked[0][2] if ranked else 0
        chosen = [node for node, _d, _n in ranked[:limit]]
        kept: list[tuple] = []
        if chosen:
            marks = backends.in_placeholders(chosen)
            cur.execute(
                "SELECT source_id, target_id, strength, updated_at, active FROM memory_edges"
                f" WHERE source_id IN ({marks}) AND target_id IN ({marks})"
                + ("" if include_frozen else " AND active"),
                chosen + chosen,
            )
            kept = cur.fetchall()
        cur.execute(
            "SELECT (SELECT COUNT(*) FROM memory_nodes),"
            " (SELECT COUNT(*) FROM pipeline_events WHERE kind = 'memory_spread')"
        )
        node_total, spread_runs = cur.fetchone()
    return DenseSubgraph(
        degrees=[(node, d) for node, d, _n in ranked[:limit]],
        edges=[(s, t, strength, updated_at, bool(active)) for s, t, strength, updated_at, active in kept],
        connected=connected, truncated=connected > limit, edge_total=edge_total, frozen_edges=frozen,
        node_total=node_total, spread_runs=spread_runs,
    )


def node_refs(nodes: Iterable[int]) -> list[tuple[int, str, int]]:
    """``(memory node, ref kind, ref id)`` of the given nodes (one query)."""
    return list(MemoryNode.objects.filter(pk__in=list(nodes)).values_list("id", "ref_kind", "ref_id"))


def node_of(kind: str, ref_id: int) -> int | None:
    """The memory node of a row, or None when it has none (yet)."""
    return MemoryNode.objects.filter(ref_kind=kind, ref_id=ref_id).values_list("id", flat=True).first()


def node_edges(node: int) -> dict[int, tuple[float, int, bool]]:
    """Every edge of a memory node, frozen included: ``{other node: (strength, updated_at, active)}``."""
    rows = MemoryEdge.objects.filter(Q(source_id=node) | Q(target_id=node)).values_list(
        "source_id", "target_id", "strength", "updated_at", "active"
    )
    return {(t if s == node else s): (strength, updated_at, active) for s, t, strength, updated_at, active in rows}


def node_rows(
    *, facts: Sequence[int], episodes: Sequence[int], knowledge: Sequence[int]
) -> tuple[dict[int, Fact], dict[int, Episode], dict[int, Knowledge]]:
    """The rows memory nodes point at, by id: facts (with their person), episodes, knowledge
    (vectors and tokens unread); one query per kind asked for."""
    return (
        Fact.objects.select_related("person").defer("embedding", "embedding_q8", "tokens").in_bulk(facts)
        if facts else {},
        Episode.objects.in_bulk(episodes) if episodes else {},
        Knowledge.objects.defer("embedding", "embedding_q8", "tokens").in_bulk(knowledge) if knowledge else {},
    )
