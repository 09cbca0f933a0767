"""Evaluation of a retrieval parameter set by replaying recorded turns.

Every turn the API served (:class:`memory.models.Turn`) recorded its inputs — current
text, conversation impression, present persons, stream kind, the time — together with
the lexical candidate pool it served (``[{factId, score, …}]``) and, once the reply was
confirmed, the fact ids that went into the prompt. That is a trace.

Evaluating a parameter set, per trace:

1. **replay** the pool through :func:`memory.recall.replay_turn_pool` — the code path
   production uses — with the evaluated overrides, at the trace's own time;
2. **reconcile** the replay with the recorded pool position by position
   (:func:`memory.engine.tuning.reconcile_trace_pool`: ``match`` / ``mismatch``, missing,
   extra, order changed, max score delta). With the parameters that were live when the
   turn was served, a mismatch means the memory itself changed since (reinforcement,
   new or invalidated facts) or the code did — the mismatch count is the first number
   of every report because it says how far the replay can be trusted;
3. **re-rank** the replay as the confirm step of production does (:func:`production_rank`:
   dense candidates join when there is a query vector, then
   :func:`memory.selectors.rank_recalled_facts`), with the query vector of the current text
   (configured embedder, cached per text; without one the lexical order stands), cut at
   ``k`` = the evaluated ``fact_recall_limit``;
4. **score** R@k and nDCG@k (``k``: the metric's cut-off, by default the evaluated
   ``fact_recall_limit``) against the turn's positives, from one of two pools that are
   never mixed into one number:

   * **human** — the turn has relevance labels with at least one fact judged relevant
     (:mod:`tuning.relevance`): the positives are those facts;
   * **weak** — no labels, but the reply was confirmed with prompt facts: the positives are
     the facts that went into the prompt (the system grading itself — what the reference
     could offer, kept for deployments nobody has labelled yet).

   A turn labelled with nothing relevant counts in neither (``labelled_without_relevant``).
   Positives outside the top k are "displaced"; facts labelled *not* relevant inside it
   are counted too (``negatives_in_top``).

Reports group the rows into ``all`` / ``group`` / ``direct`` / ``desktop`` (before the desktop row existed,
desktop turns counted only in ``all``), each with its two pools and the count of turns behind every figure. A
comparison evaluates two parameter sets on the same traces, lists per turn the facts that moved into or out of the
top k, and gives each pool's difference with a bootstrap interval over turns.

Nothing here writes memory: no reinforcement, no hit counts, no events of the recall
path (the replay runs with ``events=False``). The only
writes are the job row and one ``retrieval_eval_done`` / ``retrieval_compare_done`` event.
"""
from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils.translation import gettext as _

from memory import broker, recall
from memory.dispatch import enqueue, jobs
from memory.engine.metrics import bootstrap_mean, ndcg_at_k, recall_at_k
from memory.engine.tuning import reconcile_trace_pool
from memory.models import Fact, Job, Stream, Turn
from memory.overrides import canonical_profile_name, overrides_scope
from memory.pipeline.retention import REPLAYABLE_TURNS
from memory.providers import config as provider_config
from memory.providers.embeddings import embed_one
from memory.search import read_ahead
from memory.services import emit_event
from tuning import relevance, services

logger = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 200
#: An evaluation replays at most the newest turns retention always keeps …
MAX_TURNS_LIMIT = REPLAYABLE_TURNS
#: … or, restricted to labelled turns (retention keeps every one of them), at most this many.
MAX_LABELLED_TURNS = 5_000
#: Job kind → the registered name of its task (``tuning/tasks.py``); sent by name, rerun by
#: :func:`memory.dispatch.jobs.recover_orphaned_jobs` (registered in ``tuning/apps.py``).
JOB_TASKS = {
    "evaluate": "tuning.tasks.evaluate_task",
    "compare": "tuning.tasks.compare_task",
    "fit": "tuning.tasks.fit_task",
}
TEXT_PREVIEW_CHARS = 160
#: Report rows by where the turn happened ("all" = every turn; the others split it by stream kind).
GROUPS = ("all", "group", "direct", "desktop")
#: The two pools of positives, never mixed: relevance labels, then the prompt facts of unlabelled turns.
POOLS = ("human", "weak")
HUMAN, WEAK = POOLS
PROGRESS_INTERVAL_S = 0.25

EmbedFn = Callable[[str], Any]
ReplayFn = Callable[..., Sequence[Any]]
ProgressFn = Callable[[int, int], None]


# --------------------------------------------------------------------------- #
# Samples
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class TraceSample:
    turn_id: int
    stream_id: int
    stream_kind: str
    at: int
    text: str
    impression: str
    person_ids: tuple[int, ...]
    pool: tuple[tuple[int, float], ...]  # the recorded lexical pool, rank order
    prompt_fact_ids: tuple[int, ...]
    replied: bool
    context_message_ids: tuple[int, ...] = ()  # the recent messages that joined the turn's query
    relevant: tuple[int, ...] = ()  # facts a person labelled relevant
    irrelevant: tuple[int, ...] = ()  # facts a person labelled not relevant

    @property
    def labelled(self) -> bool:
        return bool(self.relevant or self.irrelevant)

    @property
    def pool_kind(self) -> str | None:
        """Which positives score the turn: ``human`` (labels), ``weak`` (prompt facts) or None."""
        if self.relevant:
            return HUMAN
        if not self.labelled and self.prompt_fact_ids and self.replied:
            return WEAK
        return None

    @property
    def scorable(self) -> bool:
        return self.pool_kind is not None

    @property
    def positives(self) -> list[int]:
        pool = self.pool_kind
        return list(self.relevant) if pool == HUMAN else list(dict.fromkeys(self.prompt_fact_ids)) if pool == WEAK else []


def _pool_pairs(raw: Any) -> tuple[tuple[int, float], ...]:
    pairs = []
    for entry in raw or []:
        if isinstance(entry, Mapping) and "factId" in entry:
            try:
                pairs.append((int(entry["factId"]), float(entry.get("score") or 0.0)))
            except (TypeError, ValueError):
                continue
    return tuple(pairs)


def sample_from_turn(turn: Any, labels: relevance.TurnLabels | None = None) -> TraceSample:
    return TraceSample(
        turn_id=turn.pk,
        stream_id=turn.stream_id,
        stream_kind=turn.stream_kind,
        at=int(turn.at),
        text=turn.text or "",
        impression=turn.impression or "",
        person_ids=tuple(int(p) for p in (turn.present_person_ids or [])),
        pool=_pool_pairs(turn.pool),
        prompt_fact_ids=tuple(int(f) for f in (turn.prompt_fact_ids or [])),
        replied=turn.confirmed_at is not None,
        context_message_ids=tuple(int(m) for m in (getattr(turn, "context_message_ids", None) or [])),
        relevant=tuple(sorted(labels.relevant)) if labels else (),
        irrelevant=tuple(sorted(labels.irrelevant)) if labels else (),
    )


def clamp_max_turns(value: Any, *, labelled: bool = False) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return DEFAULT_MAX_TURNS
    return max(1, min(MAX_LABELLED_TURNS if labelled else MAX_TURNS_LIMIT, n))


def selected_turns(*, streams: Iterable[int] | None = None, labelled: bool = False) -> Any:
    """The turns an evaluation may sample: of these ``streams`` only, with relevance labels only."""
    rows = Turn.objects.all()
    if streams:
        rows = rows.filter(stream_id__in=list(streams))
    if labelled:
        rows = rows.filter(pk__in=relevance.labelled_turn_ids())
    return rows


def build_samples(
    *, max_turns: int = DEFAULT_MAX_TURNS, turn_ids: Iterable[int] | None = None, streams: Iterable[int] | None = None,
    labelled: bool = False, limit: int | None = None,
) -> list[TraceSample]:
    """The most recent ``max_turns`` recorded turns (or exactly ``turn_ids``; of ``streams``; ``labelled``
    ones only), oldest first, each with its relevance labels. ``limit`` replaces the ``max_turns``
    bound (a fit reads every labelled turn)."""
    rows = selected_turns(streams=streams, labelled=labelled)
    if turn_ids is not None:
        rows = rows.filter(pk__in=list(turn_ids))
    rows = list(rows.order_by("-id")[: limit if limit is not None else clamp_max_turns(max_turns, labelled=labelled)])
    rows.reverse()
    labels = relevance.labels_of(t.pk for t in rows)
    return [sample_from_turn(t, labels.get(t.pk)) for t in rows]


def clean_streams(value: Any) -> list[int]:
    """Stream ids an evaluation is restricted to (unknown ones refused, naming them)."""
    if not value:
        return []
    ids = sorted({int(v) for v in value})
    found = set(Stream.objects.filter(pk__in=ids).values_list("id", flat=True))
    missing = [i for i in ids if i not in found]
    if missing:
        raise services.ProfileError(f"会话流不存在：{', '.join(f'#{i}' for i in missing)}", param="streams", status=404)
    return ids


# --------------------------------------------------------------------------- #
# Query vectors
# --------------------------------------------------------------------------- #


class QueryVectors:
    """Query vectors cached per text (failures cached as None), with call statistics."""

    def __init__(self, embed: EmbedFn | None, label: str = "") -> None:
        self.embed = embed
        self.label = label if embed is not None else ""
        self.calls = 0
        self.cache_hits = 0
        self.elapsed_ms = 0.0
        self._cache: dict[str, Any] = {}

    def __call__(self, text: str) -> Any:
        if self.embed is None or not text.strip():
            return None
        if text in self._cache:
            self.cache_hits += 1
            return self._cache[text]
        self.calls += 1
        started = time.perf_counter()
        try:
            vector = self.embed(text)
        except Exception:  # noqa: BLE001 — a failed embedding degrades to lexical order
            logger.warning("tuning_eval_embed_failed", exc_info=True)
            vector = None
        self.elapsed_ms += (time.perf_counter() - started) * 1000
        self._cache[text] = vector
        return vector

    def stats(self) -> dict[str, Any]:
        return {
            "embedder": self.label or None,
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "elapsed_ms": round(self.elapsed_ms, 1),
        }


def configured_query_vectors(*, serving: bool = False) -> QueryVectors:
    """Query vectors from the configured embedder; lexical order when there is none. ``serving``: for a
    request someone waits on (the inspector's replay) — a remote provider gets one short attempt."""
    try:
        embedder = provider_config.get_embedder(serving=serving)
    except Exception:  # noqa: BLE001
        logger.warning("tuning_eval_embedder_unavailable", exc_info=True)
        embedder = None
    if embedder is None:
        return QueryVectors(None)
    label = getattr(embedder, "label", "") or getattr(embedder, "name", "") or type(embedder).__name__
    return QueryVectors(lambda text: embed_one(embedder, text), str(label))


# --------------------------------------------------------------------------- #
# Replay of one trace
# --------------------------------------------------------------------------- #


def _default_replay(**kwargs: Any) -> Sequence[Any]:
    return recall.replay_turn_pool(**kwargs)


def production_rank(
    sample: TraceSample, replayed: Sequence[Any], vector: Any, limit: int, overrides: Mapping[str, Any],
    shown: frozenset[str] = frozenset(),
) -> recall.PromptRanking:
    """The confirm step of production (``memory.recall.confirm_turn``) on a replayed pool:
    with a query vector the dense candidates join the pool, facts no longer valid leave it
    (and those whose text is a line the conversation ``shown``), then the fused re-rank cuts at
    ``limit`` (``.prompt``). Read-only (nothing is reinforced)."""
    return recall.rank_pool(
        pool=replayed, query_vector=vector, person_ids=list(sample.person_ids),
        text=recall.read_turn(sample.text, (), overrides)[0],
        stream_kind=sample.stream_kind, now=sample.at, limit=limit, overrides=overrides, shown=shown,
    )


def fact_limit(overrides: Mapping[str, Any]) -> int:
    """``k``: the evaluated ``fact_recall_limit``, else the configured one."""
    return recall.fact_recall_limit(overrides)


def clamp_k(value: Any) -> int | None:
    """A metric cut-off as given (None: the evaluated ``fact_recall_limit``), within 1..50."""
    if value in (None, ""):
        return None
    return max(1, min(50, int(value)))


@dataclass
class Evaluator:
    """Replays traces with one parameter set; reusable over many samples.

    ``limit`` is the evaluated prompt size (``fact_recall_limit``), ``k`` the metrics' cut-off
    (``cutoff``, else the limit): R@5 of a 6-fact prompt counts its first five facts."""

    overrides: dict[str, Any]
    vectors: QueryVectors
    replay: ReplayFn = _default_replay
    rank: Callable[..., recall.PromptRanking] = production_rank
    cutoff: int | None = None
    #: reads kept from one replay to the next (:func:`memory.search.read_ahead.kept_state`): a fit replays the same
    #: turns under every parameter set it tries, on one snapshot of memory; None: each replay reads afresh
    reads: dict | None = None
    limit: int = field(init=False)
    k: int = field(init=False)

    def __post_init__(self) -> None:
        self.limit = fact_limit(self.overrides)
        self.k = self.cutoff or self.limit

    def ranking(self, sample: TraceSample) -> tuple[list[Any], recall.PromptRanking, Any]:
        """``(replayed lexical pool, its confirmed ranking — ``.prompt`` —, the query)`` of one trace."""
        params = dict(self.overrides)
        kept = read_ahead.kept_state(self.reads) if self.reads is not None else contextlib.nullcontext()
        with overrides_scope(self.overrides), kept:
            # the turn's conversation as it recorded it, weighed by the evaluated profile
            line, context = recall.read_turn(sample.text, recall.context_from_ids(sample.context_message_ids), params)
            shown = recall.shown_in_conversation(context, params)
            replayed = list(
                self.replay(
                    person_ids=list(sample.person_ids),
                    text=line,
                    impression=sample.impression,
                    now=sample.at,
                    stream_kind=sample.stream_kind,
                    overrides=params,
                    context=recall.conversation_lines(context, params, whole=recall.whole_text(sample.text, line)),
                    shown=shown,
                )
            )
            text_vector = self.vectors(line)
            whole = recall.read_whole(sample.text, line, context, params)
            vector = recall.conversation_query(text_vector, context, params, whole=whole) if text_vector is not None else None
            ranked = self.rank(sample, replayed, vector, self.limit, params, shown=shown)
        return replayed, ranked, vector

    def turn(self, sample: TraceSample) -> dict[str, Any]:
        replayed, ranking, vector = self.ranking(sample)
        rec = reconcile_trace_pool([(f.id, f.score) for f in replayed], list(sample.pool))
        return {
            "turn_id": sample.turn_id,
            "stream_id": sample.stream_id,
            "stream_kind": sample.stream_kind,
            "at": sample.at,
            "text": sample.text[:TEXT_PREVIEW_CHARS],
            "replied": sample.replied,
            "candidate_count": len(sample.pool),
            "recall_count": len(replayed),
            "replay_ids": [f.id for f in replayed],
            **score_turn(sample, [f.id for f in ranking.prompt], self.k),
            "vector": vector is not None,
            "reconcile": {
                "status": rec.status,
                "missing": list(rec.missing),
                "extra": list(rec.extra),
                "order_changed": rec.order_changed,
                "max_score_delta": rec.max_score_delta,
                # same ids in the same order, only the scores moved (e.g. reinforcement since)
                "drift_only": rec.status != "match" and [f.id for f in replayed] == [i for i, _ in sample.pool],
            },
        }


def score_turn(sample: TraceSample, ranked_ids: Sequence[int], k: int) -> dict[str, Any]:
    """One turn's metrics against the positives of its pool (``pool`` None: not scored)."""
    top = list(ranked_ids)[:k]
    pool = sample.pool_kind
    positives = sample.positives
    scored = pool is not None
    return {
        "pool": pool,
        "scorable": scored,
        "labelled": sample.labelled,
        "positives": positives,
        "positive_count": len(positives),
        "irrelevant": list(sample.irrelevant),
        "ranked_ids": top,
        "ndcg": ndcg_at_k(top, positives, k) if scored else None,
        "recall": recall_at_k(top, positives, k) if scored else None,
        "displaced": [p for p in positives if p not in top] if scored else [],
        "negatives_in_top": [f for f in top if f in set(sample.irrelevant)],
    }


# --------------------------------------------------------------------------- #
# Aggregation
# --------------------------------------------------------------------------- #


def _in_group(row: Mapping[str, Any], group: str) -> bool:
    return group == "all" or row["stream_kind"] == group


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def pool_stats(rows: Sequence[Mapping[str, Any]], pool: str) -> dict[str, Any]:
    """One pool's figures: ``turns`` behind them, mean ``recall`` (R@k) and ``ndcg`` (nDCG@k; None
    without turns), ``displaced`` positives and labelled-irrelevant facts in the top k (``negatives``)."""
    scored = [r for r in rows if r.get("pool") == pool]
    return {
        "turns": len(scored),
        "recall": _mean([r["recall"] for r in scored]),
        "ndcg": _mean([r["ndcg"] for r in scored]),
        "displaced": sum(len(r["displaced"]) for r in scored),
        "negatives": sum(len(r.get("negatives_in_top") or []) for r in scored),
    }


def group_stats(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``sample_count``; ``human`` and ``weak`` (:func:`pool_stats`, never mixed);
    ``labelled_without_relevant`` (labelled turns with no relevant fact: in neither pool);
    ``recall_count_median`` (upper median) and ``recall_count_mean`` (2 dp) of the replayed pool sizes;
    ``reconcile_mismatched``."""
    counts = sorted(r["recall_count"] for r in rows)
    n = len(counts)
    return {
        "sample_count": n,
        **{pool: pool_stats(rows, pool) for pool in POOLS},
        "labelled_without_relevant": sum(1 for r in rows if r.get("labelled") and r.get("pool") is None),
        "recall_count_median": counts[n // 2] if n else 0,
        "recall_count_mean": round(sum(counts) / n, 2) if n else 0.0,
        "reconcile_mismatched": sum(1 for r in rows if r["reconcile"]["status"] != "match"),
    }


def grouped(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {g: group_stats([r for r in rows if _in_group(r, g)]) for g in GROUPS}


def _iso_now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    mismatched = sum(1 for r in rows if r["reconcile"]["status"] != "match")
    drift = sum(1 for r in rows if r["reconcile"].get("drift_only"))
    return {"matched": len(rows) - mismatched, "mismatched": mismatched, "drift_only": drift}


class _Throttle:
    def __init__(self, progress: ProgressFn | None, total: int) -> None:
        self.progress, self.total, self.last = progress, total, float("-inf")

    def __call__(self, done: int, *, force: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if force or done >= self.total or now - self.last >= PROGRESS_INTERVAL_S:
            self.last = now
            self.progress(done, self.total)


def evaluate(
    samples: Sequence[TraceSample],
    overrides: Mapping[str, Any] | None,
    *,
    vectors: QueryVectors | None = None,
    profile: str | None = None,
    label: str = "",
    progress: ProgressFn | None = None,
    replay: ReplayFn | None = None,
    emit: bool = True,
    k: int | None = None,
) -> dict[str, Any]:
    """Evaluate one parameter set on ``samples``; a JSON-ready report (``k``: the metrics' cut-off)."""
    params = services.validate_params(overrides or {})
    vectors = vectors if vectors is not None else QueryVectors(None)
    ev = Evaluator(params, vectors, replay=replay or _default_replay, cutoff=k)
    tick = _Throttle(progress, len(samples))
    rows = []
    for i, sample in enumerate(samples, 1):
        rows.append(ev.turn(sample))
        tick(i)
    report = {
        "kind": "evaluate",
        "profile": profile,
        "label": label or profile or "",
        "params": params,
        "k": ev.k,
        "limit": ev.limit,
        "sample_count": len(rows),
        "reconcile": _summary(rows),
        "groups": grouped(rows),
        "embedding": vectors.stats(),
        "per_turn": rows,
        "generated_at": _iso_now(),
    }
    if emit:
        overall = report["groups"]["all"]
        emit_event(
            "retrieval_eval_done",
            {
                "profile": profile or label or "",
                "samples": len(rows),
                "k": ev.k,
                "humanTurns": overall[HUMAN]["turns"],
                "humanRecall": overall[HUMAN]["recall"],
                "weakTurns": overall[WEAK]["turns"],
                "weakNdcg": overall[WEAK]["ndcg"],
                "reconcileMismatched": report["reconcile"]["mismatched"],
                "embeddingCalls": vectors.calls,
            },
            stage="tuning",
        )
    return report


def paired_difference(rows_a: Sequence[Mapping[str, Any]], rows_b: Sequence[Mapping[str, Any]], pool: str,
                      metric: str) -> dict[str, Any] | None:
    """B − A of ``metric`` over the turns of ``pool`` (both sides score the same turns: a pool is a
    property of the turn), with its bootstrap interval over turns; None without such turns."""
    diffs = [b[metric] - a[metric] for a, b in zip(rows_a, rows_b, strict=True) if a.get("pool") == pool]
    interval = bootstrap_mean(diffs)
    return None if interval is None else interval.as_dict()


def differences(rows_a: Sequence[Mapping[str, Any]], rows_b: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per group and pool: the mean B − A of R@k and nDCG@k with bootstrap intervals over turns."""
    out: dict[str, Any] = {}
    for g in GROUPS:
        pairs = [(a, b) for a, b in zip(rows_a, rows_b, strict=True) if _in_group(a, g)]
        side_a, side_b = [a for a, _ in pairs], [b for _, b in pairs]
        out[g] = {
            pool: {metric: paired_difference(side_a, side_b, pool, metric) for metric in ("recall", "ndcg")}
            for pool in POOLS
        }
    return out


def compare(
    samples: Sequence[TraceSample],
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    vectors: QueryVectors | None = None,
    progress: ProgressFn | None = None,
    replay: ReplayFn | None = None,
    emit: bool = True,
    k: int | None = None,
) -> dict[str, Any]:
    """What-if: evaluate two targets ``{label, profile, params}`` on the same traces.

    Per turn: R@k and nDCG@k of each side (against the turn's pool of positives) and the facts
    that moved into (``moved_in``: in B's top k, not in A's) or out of (``moved_out``) the top k
    when going from A to B. ``difference``: per group and pool, B − A with a bootstrap interval.
    """
    vectors = vectors if vectors is not None else QueryVectors(None)  # shared cache: one call per text
    sides = []
    for target in (a, b):
        params = services.validate_params(target.get("params") or {})
        sides.append((target, Evaluator(params, vectors, replay=replay or _default_replay, cutoff=k)))
    tick = _Throttle(progress, len(samples))
    rows_a, rows_b, turns = [], [], []
    for i, sample in enumerate(samples, 1):
        reads: dict = {}  # both sides replay the same turn on the same memory: its reads are read once
        sides[0][1].reads = sides[1][1].reads = reads
        ra, rb = sides[0][1].turn(sample), sides[1][1].turn(sample)
        rows_a.append(ra)
        rows_b.append(rb)
        turns.append(turn_difference(sample, ra, rb))
        tick(i)
    out_sides = {}
    for key, (target, ev), rows in (("a", sides[0], rows_a), ("b", sides[1], rows_b)):
        out_sides[key] = {
            "label": target.get("label") or target.get("profile") or key.upper(),
            "profile": target.get("profile"),
            "params": ev.overrides,
            "k": ev.k,
            "limit": ev.limit,
            "reconcile": _summary(rows),
            "groups": grouped(rows),
        }
    moved_ids = {f for t in turns for f in (*t["moved_in"], *t["moved_out"], *t["positives"])}
    report = {
        "kind": "compare",
        "sample_count": len(samples),
        "a": out_sides["a"],
        "b": out_sides["b"],
        "difference": differences(rows_a, rows_b),
        "changed_turns": sum(1 for t in turns if t["moved_in"] or t["moved_out"] or t["order_changed"]),
        "per_turn": turns,
        "facts": fact_previews(moved_ids),
        "embedding": vectors.stats(),
        "generated_at": _iso_now(),
    }
    if emit:
        diff = report["difference"]["all"]
        emit_event(
            "retrieval_compare_done",
            {
                "a": out_sides["a"]["label"],
                "b": out_sides["b"]["label"],
                "samples": len(samples),
                "humanTurns": out_sides["a"]["groups"]["all"][HUMAN]["turns"],
                "humanRecallDelta": (diff[HUMAN]["recall"] or {}).get("mean"),
                "weakNdcgDelta": (diff[WEAK]["ndcg"] or {}).get("mean"),
            },
            stage="tuning",
        )
    return report


def turn_difference(sample: TraceSample, ra: Mapping[str, Any], rb: Mapping[str, Any]) -> dict[str, Any]:
    """One turn of a comparison: both sides' metrics and top k, what moved in and out."""
    top_a, top_b = ra["ranked_ids"], rb["ranked_ids"]
    set_a, set_b = set(top_a), set(top_b)
    scored = ra["pool"] is not None
    return {
        "turn_id": sample.turn_id,
        "stream_kind": sample.stream_kind,
        "at": sample.at,
        "text": ra["text"],
        "pool": ra["pool"],
        "scorable": scored,
        "positives": ra["positives"],
        "irrelevant": ra["irrelevant"],
        "recall_a": ra["recall"],
        "recall_b": rb["recall"],
        "ndcg_a": ra["ndcg"],
        "ndcg_b": rb["ndcg"],
        "recall_delta": (rb["recall"] - ra["recall"]) if scored else None,
        "ndcg_delta": (rb["ndcg"] - ra["ndcg"]) if scored else None,
        "top_a": top_a,
        "top_b": top_b,
        "moved_in": [f for f in top_b if f not in set_a],
        "moved_out": [f for f in top_a if f not in set_b],
        "order_changed": set_a == set_b and top_a != top_b,
        "reconcile_a": ra["reconcile"]["status"],
        "reconcile_b": rb["reconcile"]["status"],
    }


def fact_previews(ids: Iterable[int], limit: int = 2000) -> dict[str, str]:
    """``{"<id>": content}`` (JSON keys are strings) for display of moved / displaced facts."""
    wanted = list(dict.fromkeys(ids))[:limit]
    return {str(i): c[:TEXT_PREVIEW_CHARS] for i, c in Fact.objects.filter(pk__in=wanted).values_list("id", "content")}


# --------------------------------------------------------------------------- #
# Targets and jobs
# --------------------------------------------------------------------------- #


def resolve_target(*, profile: str | None = None, params: Mapping[str, Any] | None = None, label: str = "") -> dict:
    """What to evaluate: a stored profile, explicit params, or (neither) the active profile.

    The parameters are resolved now, so a job evaluates what was asked for even if a
    profile changes while it waits in the queue.
    """
    if profile is not None and str(profile).strip():
        name = canonical_profile_name(str(profile).strip())
        values = services.load_profile_params(name)
        if values is None:
            raise services.ProfileError(_("参数方案「%(name)s」不存在") % {"name": name}, param="profile", status=404)
        return {"label": label or name, "profile": name, "params": values}
    if params is not None:
        return {"label": label or "草稿", "profile": None, "params": services.validate_params(params)}
    name = services.active_profile_name()
    return {
        "label": label or f"当前生效（{name}）",
        "profile": name,
        "params": services.load_profile_params(name) or {},
    }


def _enqueue(kind: str, job_id: int) -> None:
    """Send the job's task right after commit; if the broker is down, fail the job and re-raise.

    :class:`memory.broker.BrokerUnavailable` propagates from the committing
    ``atomic`` block (HTTP 503); the job is already ``failed`` with the reason,
    so it never waits ``queued`` for a task that was never sent.
    """
    def send() -> None:
        try:
            enqueue.publish(JOB_TASKS[kind], (job_id,))
        except broker.BrokerUnavailable as exc:
            logger.warning("tuning_job_enqueue_failed job=%s error=%s", job_id, exc)
            jobs.job_fail(job_id=job_id, error=f"无法提交后台任务：{exc}")
            raise

    transaction.on_commit(send)


@dataclass(frozen=True)
class Selection:
    """Which turns a job replays: the newest ``max_turns`` (of ``streams``; ``labelled`` ones only) and the
    metrics' cut-off ``k`` (None: each side's ``fact_recall_limit``). ``max_turns`` is at most
    :data:`MAX_TURNS_LIMIT`, or :data:`MAX_LABELLED_TURNS` for labelled turns."""

    max_turns: int = DEFAULT_MAX_TURNS
    streams: tuple[int, ...] = ()
    labelled: bool = False
    k: int | None = None

    @classmethod
    def of(cls, *, max_turns: Any = DEFAULT_MAX_TURNS, streams: Any = None, labelled: Any = False,
           k: Any = None) -> Selection:
        return cls(clamp_max_turns(max_turns, labelled=bool(labelled)), tuple(clean_streams(streams)), bool(labelled),
                   clamp_k(k))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Selection:
        labelled = bool(params.get("labelled"))
        return cls(clamp_max_turns(params.get("max_turns", DEFAULT_MAX_TURNS), labelled=labelled),
                   tuple(params.get("streams") or ()), labelled, clamp_k(params.get("k")))

    def as_params(self) -> dict[str, Any]:
        return {"max_turns": self.max_turns, "streams": list(self.streams), "labelled": self.labelled, "k": self.k}

    def samples(self) -> list[TraceSample]:
        return build_samples(max_turns=self.max_turns, streams=self.streams, labelled=self.labelled)


def submit_evaluation(target: Mapping[str, Any], *, max_turns: Any = DEFAULT_MAX_TURNS, user: str = "",
                      selection: Selection | None = None):
    """Create an ``evaluate`` job and enqueue it after commit; returns the Job."""
    selection = selection or Selection.of(max_turns=max_turns)
    params = {"target": dict(target), **selection.as_params()}
    with transaction.atomic():
        job = jobs.job_create(kind="evaluate", params=params, user=user)
        _enqueue("evaluate", job.pk)
    return job


def submit_comparison(a: Mapping[str, Any], b: Mapping[str, Any], *, max_turns: Any = DEFAULT_MAX_TURNS, user: str = "",
                      selection: Selection | None = None):
    selection = selection or Selection.of(max_turns=max_turns)
    params = {"a": dict(a), "b": dict(b), **selection.as_params()}
    with transaction.atomic():
        job = jobs.job_create(kind="compare", params=params, user=user)
        _enqueue("compare", job.pk)
    return job


def run_job(job_id: int, *, vectors: QueryVectors | None = None, replay: ReplayFn | None = None,
            worker: str = "") -> bool:
    """Run an ``evaluate`` / ``compare`` job: queued → running → done | failed.

    Returns False when the job is missing or was already taken (duplicate delivery).
    Safe to rerun from the start (replays only read): a job whose worker died is
    re-queued by :func:`memory.dispatch.jobs.recover_orphaned_jobs`.
    """
    job = Job.objects.filter(pk=job_id).first()
    if job is None or job.kind not in ("evaluate", "compare"):
        return False
    params = job.params or {}
    selection = Selection.from_params(params)
    samples = selection.samples()
    if not jobs.job_start(job_id=job_id, total=len(samples), worker=worker):
        return False
    try:
        vectors = vectors if vectors is not None else configured_query_vectors()

        def progress(done: int, total: int) -> None:
            jobs.job_progress(job_id=job_id, progress=done, total=total)

        if job.kind == "evaluate":
            target = params.get("target") or {}
            result = evaluate(
                samples,
                target.get("params") or {},
                vectors=vectors,
                profile=target.get("profile"),
                label=target.get("label", ""),
                progress=progress,
                replay=replay,
                k=selection.k,
            )
        else:
            result = compare(samples, params.get("a") or {}, params.get("b") or {}, vectors=vectors,
                             progress=progress, replay=replay, k=selection.k)
        result["selection"] = selection.as_params()
    except Exception as exc:  # noqa: BLE001 — recorded on the job row, shown by the console
        logger.exception("tuning_job_failed job=%s", job_id)
        jobs.job_fail(job_id=job_id, error=f"{type(exc).__name__}: {exc}")
        return False
    return jobs.job_finish(job_id=job_id, result=result)
