"""Fit a retrieval profile to relevance labels: the tuning job ``fit``.

What it learns from: every recorded turn with at least one fact a person labelled relevant
(:mod:`tuning.relevance`), optionally of chosen streams. Each evaluation replays those turns
through the product's own path (:class:`tuning.evaluation.Evaluator`: the lexical pool, the
conversation as the turn read it, the query vector, the engine's ``rank``) and scores the
prompt against the labels — R@k and nDCG@k, ``k`` = the prompt size unless given.

1. **Split** — chosen on *dev* turns, reported on *held-out* turns the search never saw:
   with at least three labelled streams whole streams are held out (every third stream by
   id; turns of one conversation share facts and phrasing, so holding out a conversation is
   the honest test), else every third turn by id. Fewer than :data:`MIN_DEV_TURNS` dev or
   :data:`MIN_HELDOUT_TURNS` held-out turns is refused (:class:`FitRefused` says how many are
   needed): an interval over fewer turns says little.
2. **Search** — a compass (pattern) search over the whitelisted ranking knobs
   (:func:`knobs`: every whitelisted parameter but those :data:`memory.engine.tuning.UNFITTED`
   names — prompt size, episode counts, spreading, the reference ranking's switch), starting from the
   profile in force: each knob in turn is moved one step up, then down (a step is a quarter of
   its range, on a log scale for knobs whose range spans more than 20×); a move is kept when
   the mean nDCG@k on the dev turns rises (ties: R@k); after a sweep that keeps nothing every
   step halves, down to 1/64 of the range. It stops when the budget (evaluations, each over
   all dev turns) is spent. Why this strategy: it needs no gradient, keeps integers integral
   and values in bounds, spends its budget near the profile in force (a fitted profile then
   differs from it only where the labels ask for it), and every step of it can be read back.
3. **Report** — the chosen profile against the one in force on the held-out turns: R@k and
   nDCG@k of both, the gain with a 95 % bootstrap interval over turns, and the per-turn
   difference (facts moved into and out of the prompt, with their labels), dev turns too.
   Saving and applying it (:func:`apply_fit`) is one click, journalled; rollback as ever.

Nothing here writes memory (replays only read): a fit whose worker died is re-run from the start.
"""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from memory.dispatch import jobs
from memory.engine.metrics import bootstrap_mean
from memory.engine.tuning import UNFITTED, WHITELIST, ParamSpec
from memory.models import Job
from tuning import evaluation, relevance, services
from tuning.evaluation import Evaluator, QueryVectors, ReplayFn, TraceSample, score_turn

logger = logging.getLogger(__name__)

MIN_DEV_TURNS = 20
MIN_HELDOUT_TURNS = 10
MIN_TURNS = MIN_DEV_TURNS + MIN_HELDOUT_TURNS
DEFAULT_BUDGET = 40
MAX_BUDGET = 400
#: A fit reads at most this many labelled turns (the newest).
MAX_FIT_TURNS = 5_000
FIRST_STEP = 0.25  # of a knob's (scaled) range
LAST_STEP = 1 / 64
LOG_SCALE_RATIO = 20.0
#: The smallest held-out nDCG@k gain the report calls better: one point. A smaller one whose interval lies above
#: 0 is real but too small to be worth a change of profile (a tie broken on many turns at once).
MIN_GAIN = 0.01
PROGRESS_INTERVAL_S = 0.5


class FitRefused(services.ProfileError):
    """Too few labelled turns for a trustworthy answer; says how many are needed (HTTP 409)."""

    def __init__(self, message: str, *, have: int, needed: int = MIN_TURNS) -> None:
        super().__init__(message, param="labels", status=409)
        self.have = have
        self.needed = needed


def knobs() -> dict[str, ParamSpec]:
    """The whitelisted parameters a fit searches: all of them but the ones that set sizes or switch
    rankings (:data:`memory.engine.tuning.UNFITTED`) — a knob added to the whitelist is searched."""
    return {name: spec for name, spec in WHITELIST.items() if name not in UNFITTED}


# --------------------------------------------------------------------------- #
# The split
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Split:
    how: str  # "stream" | "turn"
    dev: list[TraceSample]
    heldout: list[TraceSample]

    def as_dict(self) -> dict[str, Any]:
        return {
            "how": self.how,
            "dev_turns": len(self.dev),
            "heldout_turns": len(self.heldout),
            "dev_streams": sorted({s.stream_id for s in self.dev}),
            "heldout_streams": sorted({s.stream_id for s in self.heldout}),
        }


def refusal_message(have: int) -> str:
    return (
        f"标注太少，拟合不出可信的结果：需要至少 {MIN_TURNS} 个回合各有至少一条「相关」标注"
        f"（{MIN_DEV_TURNS} 个用来挑选参数，{MIN_HELDOUT_TURNS} 个留作检验），现在只有 {have} 个。"
    )


def split(samples: Sequence[TraceSample]) -> Split:
    """Dev and held-out turns (module docstring, step 1); :class:`FitRefused` when either is too small."""
    usable = sorted((s for s in samples if s.relevant), key=lambda s: s.turn_id)
    if len(usable) < MIN_TURNS:
        raise FitRefused(refusal_message(len(usable)), have=len(usable))
    streams = sorted({s.stream_id for s in usable})
    if len(streams) >= 3:
        held_streams = set(streams[2::3])
        dev = [s for s in usable if s.stream_id not in held_streams]
        held = [s for s in usable if s.stream_id in held_streams]
        if len(dev) >= MIN_DEV_TURNS and len(held) >= MIN_HELDOUT_TURNS:
            return Split("stream", dev, held)
    held = usable[2::3]
    held_ids = {s.turn_id for s in held}
    return Split("turn", [s for s in usable if s.turn_id not in held_ids], held)


def labelled_samples(*, streams: Sequence[int] = ()) -> list[TraceSample]:
    """Every turn with a relevant label (of ``streams``), oldest first, at most :data:`MAX_FIT_TURNS`."""
    rows = evaluation.build_samples(streams=streams, labelled=True, limit=MAX_FIT_TURNS)
    return [s for s in rows if s.relevant]


def check_enough(*, streams: Sequence[int] = ()) -> int:
    """How many turns a fit would learn from; :class:`FitRefused` when too few (before a job is made)."""
    turns = evaluation.selected_turns(streams=streams).filter(pk__in=relevance.labelled_turn_ids(relevant_only=True))
    have = turns.count()
    if have < MIN_TURNS:
        raise FitRefused(refusal_message(have), have=have)
    split(labelled_samples(streams=streams))  # the split itself may leave too few on a side
    return have


# --------------------------------------------------------------------------- #
# The search space
# --------------------------------------------------------------------------- #


@dataclass(frozen=True)
class Axis:
    """One knob as the search moves it: a position in [0, 1] of its (log-)scaled range."""

    name: str
    spec: ParamSpec

    @property
    def log(self) -> bool:
        return self.spec.min > 0 and self.spec.max / self.spec.min >= LOG_SCALE_RATIO

    def _t(self, v: float) -> float:
        return math.log(v) if self.log else float(v)

    def position(self, value: float) -> float:
        lo, hi = self._t(self.spec.min), self._t(self.spec.max)
        return 0.0 if hi == lo else min(1.0, max(0.0, (self._t(value) - lo) / (hi - lo)))

    def value(self, position: float) -> float | int:
        lo, hi = self._t(self.spec.min), self._t(self.spec.max)
        raw = lo + min(1.0, max(0.0, position)) * (hi - lo)
        v = math.exp(raw) if self.log else raw
        v = min(self.spec.max, max(self.spec.min, v))
        return int(round(v)) if self.spec.kind == "int" else round(v, 4)


def start_point(base: Mapping[str, Any], axes: Sequence[Axis]) -> dict[str, float | int]:
    """The profile in force as a point of the search: each knob's override, else its default."""
    return {a.name: base.get(a.name, a.spec.legacy) for a in axes}


def params_of(base: Mapping[str, Any], point: Mapping[str, Any]) -> dict[str, Any]:
    """A full parameter set: the profile in force with the point's knobs (defaults left implicit)."""
    out = dict(base)
    for name, value in point.items():
        if name in base or value != WHITELIST[name].legacy:
            out[name] = value
    return services.validate_params(out)


# --------------------------------------------------------------------------- #
# The search
# --------------------------------------------------------------------------- #


@dataclass
class Scored:
    point: dict[str, Any]
    recall: float
    ndcg: float
    rows: list[dict[str, Any]]

    @property
    def key(self) -> tuple[float, float]:
        return (round(self.ndcg, 9), round(self.recall, 9))


ProgressFn = Callable[[int], None]


class Search:
    """Compass search (module docstring, step 2) of the dev turns, one evaluation at a time."""

    def __init__(self, *, base: Mapping[str, Any], dev: Sequence[TraceSample], vectors: QueryVectors, k: int | None,
                 budget: int, replay: ReplayFn | None = None, tick: ProgressFn | None = None) -> None:
        self.base = dict(base)
        self.dev = list(dev)
        self.vectors = vectors
        self.cutoff = k
        self.budget = budget
        self.replay = replay
        self.tick = tick or (lambda n: None)
        self.axes = [Axis(name, spec) for name, spec in knobs().items()]
        self.trajectory: list[dict[str, Any]] = []
        self.done_turns = 0
        self._seen: dict[tuple, Scored] = {}
        self.reads: dict = {}  # every evaluation replays the same turns on one snapshot of memory, read once

    def evaluate(self, point: Mapping[str, Any], samples: Sequence[TraceSample] | None = None) -> Scored:
        samples = self.dev if samples is None else samples
        params = params_of(self.base, point)
        kwargs = {"replay": self.replay} if self.replay is not None else {}
        ev = Evaluator(params, self.vectors, cutoff=self.cutoff, reads=self.reads, **kwargs)
        rows = []
        for sample in samples:
            _replayed, ranking, _vector = ev.ranking(sample)
            rows.append({"turn_id": sample.turn_id, **score_turn(sample, [f.id for f in ranking.prompt], ev.k)})
            self.done_turns += 1
            self.tick(self.done_turns)
        return Scored(dict(point), _mean([r["recall"] for r in rows]), _mean([r["ndcg"] for r in rows]), rows)

    def _scored(self, point: dict[str, Any], moved: str = "") -> Scored | None:
        key = tuple(sorted(point.items()))
        if key in self._seen:
            return self._seen[key]
        if len(self._seen) >= self.budget:
            return None
        scored = self.evaluate(point)
        self._seen[key] = scored
        self.trajectory.append({"moved": moved, "point": dict(point), "recall": round(scored.recall, 4),
                                "ndcg": round(scored.ndcg, 4)})
        return scored

    def run(self) -> tuple[Scored, Scored]:
        """``(the start, the best point found)`` on the dev turns."""
        start = self._scored(start_point(self.base, self.axes), "")
        assert start is not None  # the budget is at least 1
        best = start
        positions = {a.name: a.position(best.point[a.name]) for a in self.axes}
        step = FIRST_STEP
        while step >= LAST_STEP and len(self._seen) < self.budget:
            kept = False
            for axis in self.axes:
                for direction in (1, -1):
                    value = axis.value(positions[axis.name] + direction * step)
                    if value == best.point[axis.name]:
                        continue
                    candidate = self._scored({**best.point, axis.name: value}, axis.name)
                    if candidate is None:
                        break
                    if candidate.key > best.key:
                        best, kept = candidate, True
                        positions[axis.name] = axis.position(value)
                        self.trajectory[-1]["kept"] = True
                        break
            if not kept:
                step /= 2
        return start, best


def _mean(values: Sequence[float | None]) -> float:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else 0.0


# --------------------------------------------------------------------------- #
# The report
# --------------------------------------------------------------------------- #


def _figures(scored: Scored) -> dict[str, Any]:
    return {"turns": len(scored.rows), "recall": round(scored.recall, 4), "ndcg": round(scored.ndcg, 4)}


def _gain(base: Scored, chosen: Scored, metric: str) -> dict[str, Any] | None:
    interval = bootstrap_mean([b[metric] - a[metric] for a, b in zip(base.rows, chosen.rows, strict=True)])
    return None if interval is None else interval.as_dict()


def _per_turn(split_name: str, samples: Sequence[TraceSample], base: Scored, chosen: Scored) -> list[dict[str, Any]]:
    out = []
    for sample, a, b in zip(samples, base.rows, chosen.rows, strict=True):
        top_a, top_b = a["ranked_ids"], b["ranked_ids"]
        out.append({
            "turn_id": sample.turn_id, "stream_id": sample.stream_id, "split": split_name,
            "text": sample.text[: evaluation.TEXT_PREVIEW_CHARS],
            "relevant": list(sample.relevant), "irrelevant": list(sample.irrelevant),
            "recall_base": a["recall"], "recall_chosen": b["recall"],
            "ndcg_base": round(a["ndcg"], 4), "ndcg_chosen": round(b["ndcg"], 4),
            "top_base": top_a, "top_chosen": top_b,
            "moved_in": [f for f in top_b if f not in top_a], "moved_out": [f for f in top_a if f not in top_b],
        })
    return out


def verdict(gain: Mapping[str, Any] | None, changed: Mapping[str, Any]) -> str:
    """What the held-out check says of the chosen profile (``gain``: its nDCG@k gain with an interval):
    ``unchanged`` (the search kept nothing); ``better`` (the interval lies above 0 and the gain is at least
    :data:`MIN_GAIN`); ``negligible`` (above 0, but smaller than that: real, too small to be worth a change
    of profile); ``worse`` (below 0); ``unsure`` (it spans 0: the labels do not show it is better)."""
    if not changed:
        return "unchanged"
    if gain is None:
        return "unsure"
    if gain["low"] > 0:
        return "better" if gain["mean"] >= MIN_GAIN else "negligible"
    if gain["high"] < 0:
        return "worse"
    return "unsure"


def fit(
    samples: Sequence[TraceSample], base: Mapping[str, Any], *, budget: int = DEFAULT_BUDGET,
    vectors: QueryVectors | None = None, k: int | None = None, base_label: str = "",
    replay: ReplayFn | None = None, progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Search on dev turns, check on held-out ones; a JSON-ready report (module docstring)."""
    parts = split(samples)
    budget = max(1, min(MAX_BUDGET, int(budget)))
    base = services.validate_params(base or {})
    vectors = vectors if vectors is not None else QueryVectors(None)
    total = budget * len(parts.dev) + 2 * len(parts.heldout)
    last = [float("-inf")]

    def tick(done: int) -> None:
        now = time.monotonic()
        if progress is not None and (now - last[0] >= PROGRESS_INTERVAL_S or done >= total):
            last[0] = now
            progress(done, total)

    search = Search(base=base, dev=parts.dev, vectors=vectors, k=k, budget=budget, replay=replay, tick=tick)
    started = time.monotonic()
    start, best = search.run()
    held_base = search.evaluate(start.point, parts.heldout)
    held_best = held_base if best is start else search.evaluate(best.point, parts.heldout)
    if progress is not None:
        progress(total, total)
    changed = {n: {"from": start.point[n], "to": v} for n, v in best.point.items() if v != start.point[n]}
    gain = {m: _gain(held_base, held_best, m) for m in ("recall", "ndcg")}
    ev = Evaluator(params_of(base, best.point), vectors, cutoff=k)
    per_turn = _per_turn("heldout", parts.heldout, held_base, held_best) + _per_turn("dev", parts.dev, start, best)
    facts = {f for t in per_turn for f in (*t["moved_in"], *t["moved_out"], *t["relevant"])}
    return {
        "kind": "fit",
        "k": ev.k,
        "limit": ev.limit,
        "strategy": "compass",
        "objective": "ndcg",
        "budget": budget,
        "evaluations": len(search.trajectory),
        "seconds": round(time.monotonic() - started, 1),
        "knobs": {
            a.name: {"kind": a.spec.kind, "min": a.spec.min, "max": a.spec.max, "scale": "log" if a.log else "linear",
                     "start": start.point[a.name], "chosen": best.point[a.name]}
            for a in search.axes
        },
        "split": parts.as_dict(),
        "base": {"label": base_label, "params": base},
        "chosen": {"params": params_of(base, best.point), "changed": changed},
        "dev": {"base": _figures(start), "chosen": _figures(best)},
        "heldout": {"base": _figures(held_base), "chosen": _figures(held_best), "gain": gain},
        "verdict": verdict(gain["ndcg"], changed),
        "trajectory": search.trajectory,
        "per_turn": per_turn,
        "facts": evaluation.fact_previews(facts),
        "embedding": vectors.stats(),
        "generated_at": evaluation._iso_now(),
    }


# --------------------------------------------------------------------------- #
# The job
# --------------------------------------------------------------------------- #


def submit_fit(*, budget: Any = DEFAULT_BUDGET, streams: Any = None, k: Any = None, profile: str | None = None,
               user: str = "") -> Job:
    """Create a ``fit`` job (after :func:`check_enough`) and enqueue it after commit."""
    try:
        budget = int(budget)
    except (TypeError, ValueError):
        raise services.ProfileError("budget 需要整数", param="budget") from None
    if not 1 <= budget <= MAX_BUDGET:
        raise services.ProfileError(f"budget 需要在 1 到 {MAX_BUDGET} 之间", param="budget")
    stream_ids = evaluation.clean_streams(streams)
    have = check_enough(streams=stream_ids)
    base = evaluation.resolve_target(profile=profile)
    params = {"base": base, "budget": budget, "streams": stream_ids, "k": evaluation.clamp_k(k), "turns": have}
    with transaction.atomic():
        job = jobs.job_create(kind="fit", params=params, user=user)
        evaluation._enqueue("fit", job.pk)
    return job


def run_fit_job(job_id: int, *, vectors: QueryVectors | None = None, replay: ReplayFn | None = None,
                worker: str = "") -> bool:
    """Run a ``fit`` job: queued → running → done | failed (too few labels by now: failed, saying why)."""
    job = Job.objects.filter(pk=job_id, kind="fit").first()
    if job is None:
        return False
    params = job.params or {}
    samples = labelled_samples(streams=params.get("streams") or ())
    if not jobs.job_start(job_id=job_id, total=0, worker=worker):
        return False
    try:
        vectors = vectors if vectors is not None else evaluation.configured_query_vectors()
        base = params.get("base") or {}

        def progress(done: int, total: int) -> None:
            jobs.job_progress(job_id=job_id, progress=done, total=total)

        result = fit(samples, base.get("params") or {}, budget=params.get("budget", DEFAULT_BUDGET), vectors=vectors,
                     k=evaluation.clamp_k(params.get("k")), base_label=base.get("label", ""), replay=replay,
                     progress=progress)
        result["base"]["profile"] = base.get("profile")
    except FitRefused as exc:
        jobs.job_fail(job_id=job_id, error=str(exc))
        return False
    except Exception as exc:  # noqa: BLE001 — recorded on the job row, shown by the console
        logger.exception("tuning_fit_failed job=%s", job_id)
        jobs.job_fail(job_id=job_id, error=f"{type(exc).__name__}: {exc}")
        return False
    return jobs.job_finish(job_id=job_id, result=result)


def fitted_params(job: Job) -> dict[str, Any]:
    """The chosen parameters of a finished fit; :class:`services.ProfileError` when there are none."""
    if job.kind != "fit" or job.status != Job.Status.DONE or not (job.result or {}).get("chosen"):
        raise services.ProfileError(f"拟合任务 #{job.pk} 还没有完成，没有可保存的参数", param="job", status=409)
    return services.validate_params(job.result["chosen"]["params"])


def apply_fit(job: Job, *, name: str = "", user: str = "") -> dict[str, Any]:
    """Save the fit's chosen parameters as a profile (``name``, default ``fit-<job id>``) and apply it,
    in one transaction; both journalled. Rollback is the tuning page's as ever."""
    params = fitted_params(job)
    name = (name or "").strip() or f"fit-{job.pk}"
    with transaction.atomic():
        row = services.save_profile(name, params, user=user, source=f"fit #{job.pk}")
        applied = services.apply_profile(row.name, user=user, source=f"fit #{job.pk}")
    return applied
