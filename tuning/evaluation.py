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
4. **score** nDCG@k against the prompt facts when the trace is scorable (it has prompt
   facts and its reply was confirmed); positives outside the top k are "displaced".

Reports group the rows into ``all`` / ``group`` / ``direct`` / ``desktop`` (before the desktop row existed, desktop turns counted only in
``all``). A comparison evaluates two parameter sets on the same traces and lists, per
turn, the facts that moved into or out of the top k.

Nothing here writes memory: no reinforcement, no hit counts, no events of the recall
path (the replay runs with ``events=False``). The only
writes are the job row and one ``retrieval_eval_done`` / ``retrieval_compare_done`` event.
"""
from __future__ import annotations

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
from memory.engine.metrics import ndcg_at_k, recall_at_k
from memory.engine.tuning import reconcile_trace_pool
from memory.models import Fact, Job, Turn
from memory.overrides import overrides_scope
from memory.pipeline.retention import REPLAYABLE_TURNS
from memory.providers import config as provider_config
from memory.providers.embeddings import embed_one
from memory.services import emit_event
from tuning import services

logger = logging.getLogger(__name__)

DEFAULT_MAX_TURNS = 200
#: An evaluation replays at most the newest turns retention always keeps.
MAX_TURNS_LIMIT = REPLAYABLE_TURNS
#: Job kind → the registered name of its task (``tuning/tasks.py``); sent by name, rerun by
#: :func:`memory.dispatch.jobs.recover_orphaned_jobs` (registered in ``tuning/apps.py``).
JOB_TASKS = {"evaluate": "tuning.tasks.evaluate_task", "compare": "tuning.tasks.compare_task"}
TEXT_PREVIEW_CHARS = 160
#: Report rows by where the turn happened ("all" = every turn; the others split it by stream kind).
GROUPS = ("all", "group", "direct", "desktop")
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

    @property
    def scorable(self) -> bool:
        return bool(self.prompt_fact_ids) and self.replied


def _pool_pairs(raw: Any) -> tuple[tuple[int, float], ...]:
    pairs = []
    for entry in raw or []:
        if isinstance(entry, Mapping) and "factId" in entry:
            try:
                pairs.append((int(entry["factId"]), float(entry.get("score") or 0.0)))
            except (TypeError, ValueError):
                continue
    return tuple(pairs)


def sample_from_turn(turn: Any) -> TraceSample:
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
    )


def clamp_max_turns(value: Any) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        return DEFAULT_MAX_TURNS
    return max(1, min(MAX_TURNS_LIMIT, n))


def build_samples(*, max_turns: int = DEFAULT_MAX_TURNS, turn_ids: Iterable[int] | None = None) -> list[TraceSample]:
    """The most recent ``max_turns`` recorded turns (or exactly ``turn_ids``), oldest first."""
    rows = Turn.objects.all()
    if turn_ids is not None:
        rows = rows.filter(pk__in=list(turn_ids))
    rows = list(rows.order_by("-id")[: clamp_max_turns(max_turns)])
    rows.reverse()
    return [sample_from_turn(t) for t in rows]


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


def configured_query_vectors() -> QueryVectors:
    """Query vectors from the configured embedder; lexical order when there is none."""
    try:
        embedder = provider_config.get_embedder()
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
    sample: TraceSample, replayed: Sequence[Any], vector: Any, limit: int, overrides: Mapping[str, Any]
) -> list:
    """The confirm step of production (``memory.recall.confirm_turn``) on a replayed pool:
    with a query vector the dense candidates join the pool, facts no longer valid leave it,
    then the fused re-rank cuts at ``limit``. Read-only (nothing is reinforced)."""
    return recall.rank_pool(
        pool=replayed, query_vector=vector, person_ids=list(sample.person_ids), text=sample.text,
        stream_kind=sample.stream_kind, now=sample.at, limit=limit, overrides=overrides,
    ).prompt


def fact_limit(overrides: Mapping[str, Any]) -> int:
    """``k``: the evaluated ``fact_recall_limit``, else the configured one."""
    return recall.fact_recall_limit(overrides)


@dataclass
class Evaluator:
    """Replays traces with one parameter set; reusable over many samples."""

    overrides: dict[str, Any]
    vectors: QueryVectors
    replay: ReplayFn = _default_replay
    rank: Callable[..., list] = production_rank
    k: int = field(init=False)

    def __post_init__(self) -> None:
        self.k = fact_limit(self.overrides)

    def turn(self, sample: TraceSample) -> dict[str, Any]:
        params = dict(self.overrides)
        with overrides_scope(self.overrides):
            # the turn's conversation as it recorded it, weighed by the evaluated profile
            context = recall.context_from_ids(sample.context_message_ids)
            replayed = list(
                self.replay(
                    person_ids=list(sample.person_ids),
                    text=sample.text,
                    impression=sample.impression,
                    now=sample.at,
                    stream_kind=sample.stream_kind,
                    overrides=params,
                    context=recall.conversation_lines(context, params),
                )
            )
            rec = reconcile_trace_pool([(f.id, f.score) for f in replayed], list(sample.pool))
            text_vector = self.vectors(sample.text)
            vector = recall.conversation_query(text_vector, context, params) if text_vector is not None else None
            ranked = self.rank(sample, replayed, vector, self.k, params)
        ranked_ids = [f.id for f in ranked][: self.k]
        positives = list(dict.fromkeys(sample.prompt_fact_ids))
        top = set(ranked_ids)
        scorable = sample.scorable
        return {
            "turn_id": sample.turn_id,
            "stream_id": sample.stream_id,
            "stream_kind": sample.stream_kind,
            "at": sample.at,
            "text": sample.text[:TEXT_PREVIEW_CHARS],
            "scorable": scorable,
            "replied": sample.replied,
            "positive_count": len(positives),
            "positives": positives,
            "candidate_count": len(sample.pool),
            "recall_count": len(replayed),
            "replay_ids": [f.id for f in replayed],
            "ranked_ids": ranked_ids,
            "ndcg": ndcg_at_k(ranked_ids, positives, self.k) if scorable else None,
            "positive_recall": recall_at_k(ranked_ids, positives, self.k) if scorable else None,
            "displaced_positive": [p for p in positives if p not in top] if scorable else [],
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


# --------------------------------------------------------------------------- #
# Aggregation
# --------------------------------------------------------------------------- #


def _in_group(row: Mapping[str, Any], group: str) -> bool:
    return group == "all" or row["stream_kind"] == group


def group_stats(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``sample_count, scorable_count, ndcg_mean`` (4 dp, scorable rows; None if none),
    ``positive_recall_mean`` (share of the prompt facts inside the top k, 4 dp, scorable rows),
    ``recall_count_median`` (upper median), ``recall_count_mean`` (2 dp, all rows),
    ``displaced_positive_total`` (scorable rows), ``reconcile_mismatched``."""
    scorable = [r for r in rows if r["scorable"]]
    counts = sorted(r["recall_count"] for r in rows)
    n = len(counts)
    return {
        "sample_count": n,
        "scorable_count": len(scorable),
        "ndcg_mean": round(sum(r["ndcg"] for r in scorable) / len(scorable), 4) if scorable else None,
        "positive_recall_mean": (
            round(sum(r["positive_recall"] for r in scorable) / len(scorable), 4) if scorable else None
        ),
        "recall_count_median": counts[n // 2] if n else 0,
        "recall_count_mean": round(sum(counts) / n, 2) if n else 0.0,
        "displaced_positive_total": sum(len(r["displaced_positive"]) for r in scorable),
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
) -> dict[str, Any]:
    """Evaluate one parameter set on ``samples``; a JSON-ready report."""
    params = services.validate_params(overrides or {})
    vectors = vectors if vectors is not None else QueryVectors(None)
    ev = Evaluator(params, vectors, replay=replay or _default_replay)
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
        "sample_count": len(rows),
        "reconcile": _summary(rows),
        "groups": grouped(rows),
        "embedding": vectors.stats(),
        "per_turn": rows,
        "generated_at": _iso_now(),
    }
    if emit:
        emit_event(
            "retrieval_eval_done",
            {
                "profile": profile or label or "",
                "samples": len(rows),
                "ndcgMean": report["groups"]["all"]["ndcg_mean"],
                "reconcileMismatched": report["reconcile"]["mismatched"],
                "embeddingCalls": vectors.calls,
            },
            stage="tuning",
        )
    return report


def compare(
    samples: Sequence[TraceSample],
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    vectors: QueryVectors | None = None,
    progress: ProgressFn | None = None,
    replay: ReplayFn | None = None,
    emit: bool = True,
) -> dict[str, Any]:
    """What-if: evaluate two targets ``{label, profile, params}`` on the same traces.

    Per turn: nDCG of each side and the facts that moved into (``moved_in``: in B's
    top k, not in A's) or out of (``moved_out``) the top k when going from A to B.
    """
    vectors = vectors if vectors is not None else QueryVectors(None)  # shared cache: one call per text
    sides = []
    for target in (a, b):
        params = services.validate_params(target.get("params") or {})
        sides.append((target, Evaluator(params, vectors, replay=replay or _default_replay)))
    tick = _Throttle(progress, len(samples))
    rows_a, rows_b, turns = [], [], []
    for i, sample in enumerate(samples, 1):
        ra, rb = sides[0][1].turn(sample), sides[1][1].turn(sample)
        rows_a.append(ra)
        rows_b.append(rb)
        top_a, top_b = ra["ranked_ids"], rb["ranked_ids"]
        set_a, set_b = set(top_a), set(top_b)
        turns.append(
            {
                "turn_id": sample.turn_id,
                "stream_kind": sample.stream_kind,
                "at": sample.at,
                "text": ra["text"],
                "scorable": ra["scorable"],
                "positives": ra["positives"],
                "ndcg_a": ra["ndcg"],
                "ndcg_b": rb["ndcg"],
                "ndcg_delta": (rb["ndcg"] - ra["ndcg"]) if ra["scorable"] else None,
                "top_a": top_a,
                "top_b": top_b,
                "moved_in": [f for f in top_b if f not in set_a],
                "moved_out": [f for f in top_a if f not in set_b],
                "order_changed": set_a == set_b and top_a != top_b,
                "reconcile_a": ra["reconcile"]["status"],
                "reconcile_b": rb["reconcile"]["status"],
            }
        )
        tick(i)
    out_sides = {}
    for key, (target, ev), rows in (("a", sides[0], rows_a), ("b", sides[1], rows_b)):
        out_sides[key] = {
            "label": target.get("label") or target.get("profile") or key.upper(),
            "profile": target.get("profile"),
            "params": ev.overrides,
            "k": ev.k,
            "reconcile": _summary(rows),
            "groups": grouped(rows),
        }
    delta = {}
    for g in GROUPS:
        na, nb = out_sides["a"]["groups"][g]["ndcg_mean"], out_sides["b"]["groups"][g]["ndcg_mean"]
        delta[g] = round(nb - na, 4) if na is not None and nb is not None else None
    moved_ids = {f for t in turns for f in (*t["moved_in"], *t["moved_out"], *t["positives"])}
    report = {
        "kind": "compare",
        "sample_count": len(samples),
        "a": out_sides["a"],
        "b": out_sides["b"],
        "ndcg_delta": delta,
        "changed_turns": sum(1 for t in turns if t["moved_in"] or t["moved_out"] or t["order_changed"]),
        "per_turn": turns,
        "facts": fact_previews(moved_ids),
        "embedding": vectors.stats(),
        "generated_at": _iso_now(),
    }
    if emit:
        emit_event(
            "retrieval_compare_done",
            {
                "a": out_sides["a"]["label"],
                "b": out_sides["b"]["label"],
                "samples": len(samples),
                "ndcgMeanA": out_sides["a"]["groups"]["all"]["ndcg_mean"],
                "ndcgMeanB": out_sides["b"]["groups"]["all"]["ndcg_mean"],
            },
            stage="tuning",
        )
    return report


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
        name = str(profile).strip()
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


def submit_evaluation(target: Mapping[str, Any], *, max_turns: Any = DEFAULT_MAX_TURNS, user: str = ""):
    """Create an ``evaluate`` job and enqueue it after commit; returns the Job."""
    params = {"target": dict(target), "max_turns": clamp_max_turns(max_turns)}
    with transaction.atomic():
        job = jobs.job_create(kind="evaluate", params=params, user=user)
        _enqueue("evaluate", job.pk)
    return job


def submit_comparison(a: Mapping[str, Any], b: Mapping[str, Any], *, max_turns: Any = DEFAULT_MAX_TURNS, user: str = ""):
    params = {"a": dict(a), "b": dict(b), "max_turns": clamp_max_turns(max_turns)}
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
    samples = build_samples(max_turns=params.get("max_turns", DEFAULT_MAX_TURNS))
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
            )
        else:
            result = compare(samples, params.get("a") or {}, params.get("b") or {}, vectors=vectors,
                             progress=progress, replay=replay)
    except Exception as exc:  # noqa: BLE001 — recorded on the job row, shown by the console
        logger.exception("tuning_job_failed job=%s", job_id)
        jobs.job_fail(job_id=job_id, error=f"{type(exc).__name__}: {exc}")
        return False
    return jobs.job_finish(job_id=job_id, result=result)
