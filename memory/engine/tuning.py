"""Retrieval tuning: the whitelist of tunable parameters, their validation, and trace
reconciliation. Pure — profile storage and the active-override state live in the
``tuning`` app.

Only these parameters can be tuned; the 0.4/0.6 dense fusion, FREEZE/REVIVE and
the half-lives deliberately cannot.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from .context import (
    DEFAULT_DENSE_MESSAGES,
    DEFAULT_GAP_MINUTES,
    DEFAULT_HALF_LIFE,
    DEFAULT_LEXICAL_LINES,
    DEFAULT_SHOWN_OUT,
    DEFAULT_TEXT_LINES,
    DEFAULT_WHOLE_LEXICAL,
    DEFAULT_WHOLE_WEIGHT,
    DEFAULT_WINDOW_WEIGHT,
)
from .metrics import ndcg_at_k, recall_at_k
from .scoring import (
    DEFAULT_DENSE_MARGIN,
    DEFAULT_DENSE_SPREAD,
    DEFAULT_LEAD_GAP,
    DEFAULT_LEAD_RATIO,
    DEFAULT_LEXICAL_SHARE,
    DEFAULT_POOL_SHARE,
    DEFAULT_QUERY_MARGIN,
    DEFAULT_RETENTION_PRIOR,
    DEFAULT_TIME_BOOST,
    DEFAULT_TOLD_GAIN,
    DEFAULT_TOLD_WINDOW,
    apply_pool_percentile,
)

__all__ = [
    "ParamSpec",
    "WHITELIST",
    "BUILTIN_PROFILES",
    "UNFITTED",
    "RENAMED_PROFILES",
    "RENAMED_PARAMS",
    "TuningError",
    "validate_overrides",
    "tuned_value",
    "RECONCILE_SCORE_EPSILON",
    "RECONCILE_MATCH",
    "RECONCILE_MISMATCH",
    "ReconcileResult",
    "reconcile_trace_pool",
    "apply_pool_percentile",
    "ndcg_at_k",
    "recall_at_k",
]


@dataclass(frozen=True)
class ParamSpec:
    """One tunable parameter: ``kind`` is ``'float'`` or ``'int'``; bounds are inclusive;
    ``legacy`` is the value used when no override is active."""

    kind: str
    min: float
    max: float
    legacy: float | int
    label: str


WHITELIST: dict[str, ParamSpec] = {
    "bm25_weight": ParamSpec("float", 0.1, 5.0, 1.0, "词面相关度权重"),
    "retention_weight_floor": ParamSpec("float", 0.0, 1.0, 0.35, "留存度权重下限"),
    "ppr_alpha": ParamSpec("float", 0.1, 0.99, 0.85, "PPR 回迁概率"),
    "ppr_hops": ParamSpec("int", 1, 4, 2, "PPR 跳数"),
    "pool_score_percentile": ParamSpec("float", 0.0, 0.9, 0.0, "候选池分数百分位"),
    "fact_recall_limit": ParamSpec("int", 1, 50, 6, "进提示词的事实条数上限"),
    "recalled_episode_limit": ParamSpec("int", 0, 30, 2, "情节召回条数"),
    "recent_episode_limit": ParamSpec("int", 0, 30, 2, "近期情节条数"),
    # the ranking (memory/engine/scoring.py: rank); retention_weight_floor only acts with reference_blend = 1
    "reference_blend": ParamSpec("int", 0, 1, 0, "参考排序：相关度 × 留存权重（1 = 参考排序）"),
    "retention_prior": ParamSpec("float", 0.0, 1.0, DEFAULT_RETENTION_PRIOR, "留存度先验权重"),
    # the relevance gate (scoring.gate), calibrated per query
    "dense_margin": ParamSpec("float", -1.0, 1.0, DEFAULT_DENSE_MARGIN, "相关门：余弦可低于闲聊背景多少"),
    "query_margin": ParamSpec("float", -1.0, 1.0, DEFAULT_QUERY_MARGIN, "相关门：最佳候选高出闲聊背景多少算在问记忆"),
    "dense_spread": ParamSpec("float", 0.0, 2.0, DEFAULT_DENSE_SPREAD, "相关门：离最佳候选的余弦多近也放行"),
    "lexical_share": ParamSpec("float", 0.0, 1.0, DEFAULT_LEXICAL_SHARE, "相关门：词面覆盖占最佳候选的比例"),
    "lead_gap": ParamSpec("float", 0.0, 2.0, DEFAULT_LEAD_GAP, "相关门：向量领先第二名多少算明显领先"),
    "lead_ratio": ParamSpec("float", 1.0, 100.0, DEFAULT_LEAD_RATIO, "相关门：BM25 是第二名几倍算明显领先"),
    "pool_share": ParamSpec("float", 0.0, 1.0, DEFAULT_POOL_SHARE, "相关度的池内占比权重"),
    "time_boost": ParamSpec("float", 0.0, 1.0, DEFAULT_TIME_BOOST, "问题点明日期时，该时段内事实的加分"),
    "told_gain": ParamSpec("float", 0.0, 1.0, DEFAULT_TOLD_GAIN, "事实出处的对话与这一句相符时的加分（0 = 不看出处）"),
    "told_window": ParamSpec("int", 0, 10, DEFAULT_TOLD_WINDOW, "事实出处：前后各看几条消息"),
    # the conversation as the query (memory/engine/context.py); 0 turns a channel off
    "context_lexical_lines": ParamSpec("int", 0, 10, DEFAULT_LEXICAL_LINES, "对话上下文：词面查询的用户行数"),
    "context_dense_messages": ParamSpec("int", 0, 20, DEFAULT_DENSE_MESSAGES, "对话上下文：向量查询的消息条数"),
    "context_half_life": ParamSpec("float", 0.5, 20.0, DEFAULT_HALF_LIFE, "对话上下文：权重半衰（条）"),
    "context_window_weight": ParamSpec("float", 0.0, 1.0, DEFAULT_WINDOW_WEIGHT, "对话上下文：近期用户发言与这一句的平均向量的权重"),
    "context_gap_minutes": ParamSpec("float", 1.0, 10080.0, DEFAULT_GAP_MINUTES, "对话上下文：沉默多久算新对话（分钟）"),
    "context_text_lines": ParamSpec("int", 0, 1, DEFAULT_TEXT_LINES, "对话上下文：多行的发言按对话读（1 = 是）"),
    "context_whole_weight": ParamSpec("float", 0.0, 1.0, DEFAULT_WHOLE_WEIGHT, "对话上下文：整段对话的向量的权重"),
    "context_whole_lexical": ParamSpec("float", 0.0, 1.0, DEFAULT_WHOLE_LEXICAL, "对话上下文：多行发言整段作词面查询的权重"),
    "context_shown_out": ParamSpec("int", 0, 1, DEFAULT_SHOWN_OUT, "对话上下文：对话里已有的原话不作记忆召回（1 = 是）"),
}

#: Whitelisted parameters a fit to relevance labels (``tuning.fit``) leaves alone: they set how many
#: facts and episodes a turn gets, steer association spreading (not a turn's ranking), or switch to
#: the reference ranking kept for comparison (with the one knob only that ranking reads). Every other
#: whitelisted parameter — a knob added later included — is searched.
UNFITTED: frozenset[str] = frozenset({
    "fact_recall_limit", "recalled_episode_limit", "recent_episode_limit", "ppr_alpha", "ppr_hops", "reference_blend",
    "retention_weight_floor",
})

#: Built-in profiles besides ``default`` (= no overrides): name → params.
BUILTIN_PROFILES: dict[str, dict[str, float | int]] = {
    "reference": {"reference_blend": 1, "context_lexical_lines": 0, "context_dense_messages": 0},
}

#: Names retired by a rename → their names now. Turns, profiles and the journal were rewritten by
#: ``tuning/migrations/0004_reference_profile``; these keep an old client, an exported profile
#: file or a stored evaluation that still says ``seed`` working (the built-in profile was called
#: "seed" after the design document it reproduces — docs/REFERENCE.md — and "seed" now means only
#: the starting nodes of spreading activation).
RENAMED_PROFILES: dict[str, str] = {"seed": "reference"}
RENAMED_PARAMS: dict[str, str] = {"seed_blend": "reference_blend"}


class TuningError(ValueError):
    """An invalid override; ``param`` names the offending parameter (``None`` if not applicable)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def validate_overrides(values: Mapping[str, object] | None) -> dict[str, float | int]:
    """Validate parameter overrides and cast them to their declared type.

    Rules (each failure raises :class:`TuningError` naming the parameter): the name must
    be in :data:`WHITELIST` ("不在调优白名单"); the value must be a real number and not a
    bool ("需要数值"); integer parameters need an integral value — ``3.0`` is rejected
    ("需要整数"); the value must lie within the inclusive bounds ("越界"; NaN and ±inf
    are out of range). Floats parameters accept ints. ``None``/empty → ``{}``. A retired name
    (:data:`RENAMED_PARAMS`) is read as its new one; giving both is an error.
    """
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise TuningError("调优参数必须是「名称 → 数值」的映射")
    out: dict[str, float | int] = {}
    for name, value in values.items():
        if isinstance(name, str) and name in RENAMED_PARAMS:
            if RENAMED_PARAMS[name] in values:
                raise TuningError(f"参数 {name} 已改名为 {RENAMED_PARAMS[name]}，不能两个都给", param=name)
            name = RENAMED_PARAMS[name]
        spec = WHITELIST.get(name) if isinstance(name, str) else None
        if spec is None:
            raise TuningError(f"参数 {name} 不在调优白名单", param=str(name))
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TuningError(f"参数 {name} 需要数值", param=name)
        if spec.kind == "int":
            if not isinstance(value, numbers.Integral):
                raise TuningError(f"参数 {name} 需要整数", param=name)
            cast: float | int = int(value)
        else:
            cast = float(value)
        if not (math.isfinite(cast) and spec.min <= cast <= spec.max):
            raise TuningError(f"参数 {name} 越界：取值范围 [{spec.min}, {spec.max}]", param=name)
        out[name] = cast
    return out


def tuned_value(
    overrides: Mapping[str, float | int] | None, name: str, default: float | int | None = None
) -> float | int:
    """Effective value of ``name``: the override if present, else ``default``, else the spec's legacy value."""
    if name not in WHITELIST:
        raise TuningError(f"参数 {name} 不在调优白名单", param=name)
    if overrides and name in overrides:
        return overrides[name]
    return WHITELIST[name].legacy if default is None else default


RECONCILE_SCORE_EPSILON: float = 1e-12
RECONCILE_MATCH: str = "match"
RECONCILE_MISMATCH: str = "mismatch"


@dataclass(frozen=True)
class ReconcileResult:
    """Comparison of a replayed candidate pool with the pool recorded in a trace."""

    status: str
    missing: list[Hashable] = field(default_factory=list)
    extra: list[Hashable] = field(default_factory=list)
    order_changed: bool = False
    max_score_delta: float | None = None

    @property
    def matched(self) -> bool:
        """True iff ``status == 'match'``."""
        return self.status == RECONCILE_MATCH


def reconcile_trace_pool(
    replay: Sequence[tuple[Hashable, float]],
    trace: Sequence[tuple[Hashable, float]],
) -> ReconcileResult:
    """Compare a replayed pool with a recorded one (both ``[(id, score), ...]`` in rank order).

    ``missing`` = trace ids absent from the replay (trace order); ``extra`` = replay ids
    absent from the trace (replay order); ``max_score_delta`` = max |Δscore| over common
    ids (``None`` if there are none); ``order_changed`` only when both id sets are equal but
    the sequences differ. ``status`` is ``'match'`` iff the id sequences are identical and
    ``max_score_delta`` is ``None`` or ``<= RECONCILE_SCORE_EPSILON``.
    """
    replay_ids = [ident for ident, _score in replay]
    trace_ids = [ident for ident, _score in trace]
    replay_scores: dict[Hashable, float] = {}
    for ident, value in replay:
        replay_scores.setdefault(ident, float(value))
    trace_scores: dict[Hashable, float] = {}
    for ident, value in trace:
        trace_scores.setdefault(ident, float(value))
    missing = [ident for ident in dict.fromkeys(trace_ids) if ident not in replay_scores]
    extra = [ident for ident in dict.fromkeys(replay_ids) if ident not in trace_scores]
    common = [ident for ident in replay_scores if ident in trace_scores]
    max_delta = max((abs(replay_scores[i] - trace_scores[i]) for i in common), default=None)
    same_sequence = replay_ids == trace_ids
    order_changed = set(replay_ids) == set(trace_ids) and not same_sequence
    close = max_delta is None or max_delta <= RECONCILE_SCORE_EPSILON
    status = RECONCILE_MATCH if same_sequence and close else RECONCILE_MISMATCH
    return ReconcileResult(
        status=status,
        missing=missing,
        extra=extra,
        order_changed=order_changed,
        max_score_delta=max_delta,
    )
