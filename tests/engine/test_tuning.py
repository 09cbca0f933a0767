"""Tuning whitelist, blend score, pool percentile, reconciliation — docs/REFERENCE.md §6
and §12."""

from __future__ import annotations

import pytest

from memory.engine.decay import relevance_from_bm25, score
from memory.engine.scoring import (
    DENSE_WEIGHT,
    LEXICAL_WEIGHT,
    apply_pool_percentile,
    blend_score,
    fused_relevance,
)
from memory.engine.tuning import (
    RECONCILE_SCORE_EPSILON,
    WHITELIST,
    ParamSpec,
    TuningError,
    reconcile_trace_pool,
    tuned_value,
    validate_overrides,
)


def test_whitelist_table() -> None:
    assert WHITELIST == {
        "bm25_weight": ParamSpec("float", 0.1, 5.0, 1.0, "词面相关度权重"),
        "retention_weight_floor": ParamSpec("float", 0.0, 1.0, 0.35, "留存度权重下限"),
        "ppr_alpha": ParamSpec("float", 0.1, 0.99, 0.85, "PPR 回迁概率"),
        "ppr_hops": ParamSpec("int", 1, 4, 2, "PPR 跳数"),
        "pool_score_percentile": ParamSpec("float", 0.0, 0.9, 0.0, "候选池分数百分位"),
        "fact_recall_limit": ParamSpec("int", 1, 50, 6, "进提示词的事实条数上限"),
        "recalled_episode_limit": ParamSpec("int", 0, 30, 2, "情节召回条数"),
        "recent_episode_limit": ParamSpec("int", 0, 30, 2, "近期情节条数"),
        "reference_blend": ParamSpec("int", 0, 1, 0, "参考排序：相关度 × 留存权重（1 = 参考排序）"),
        "retention_prior": ParamSpec("float", 0.0, 1.0, 0.02, "留存度先验权重"),
        "dense_margin": ParamSpec("float", -1.0, 1.0, -0.2, "相关门：余弦可低于闲聊背景多少"),
        "query_margin": ParamSpec("float", -1.0, 1.0, -0.3, "相关门：最佳候选高出闲聊背景多少算在问记忆"),
        "dense_spread": ParamSpec("float", 0.0, 2.0, 0.3, "相关门：离最佳候选的余弦多近也放行"),
        "lexical_share": ParamSpec("float", 0.0, 1.0, 0.1, "相关门：词面覆盖占最佳候选的比例"),
        "lead_gap": ParamSpec("float", 0.0, 2.0, 0.15, "相关门：向量领先第二名多少算明显领先"),
        "lead_ratio": ParamSpec("float", 1.0, 100.0, 2.0, "相关门：BM25 是第二名几倍算明显领先"),
        "pool_share": ParamSpec("float", 0.0, 1.0, 0.5, "相关度的池内占比权重"),
        "time_boost": ParamSpec("float", 0.0, 1.0, 0.2, "问题点明日期时，该时段内事实的加分"),
        "told_gain": ParamSpec("float", 0.0, 1.0, 0.7, "事实出处的对话与这一句相符时的加分（0 = 不看出处）"),
        "told_window": ParamSpec("int", 0, 10, 2, "事实出处：前后各看几条消息"),
        "context_lexical_lines": ParamSpec("int", 0, 10, 3, "对话上下文：词面查询的用户行数"),
        "context_dense_messages": ParamSpec("int", 0, 20, 12, "对话上下文：向量查询的消息条数"),
        "context_half_life": ParamSpec("float", 0.5, 20.0, 4.0, "对话上下文：权重半衰（条）"),
        "context_window_weight": ParamSpec("float", 0.0, 1.0, 1.0, "对话上下文：近期用户发言与这一句的平均向量的权重"),
        "context_gap_minutes": ParamSpec("float", 1.0, 10080.0, 60.0, "对话上下文：沉默多久算新对话（分钟）"),
        "context_text_lines": ParamSpec("int", 0, 1, 1, "对话上下文：多行的发言按对话读（1 = 是）"),
        "context_whole_weight": ParamSpec("float", 0.0, 1.0, 1.0, "对话上下文：整段对话的向量的权重"),
        "context_whole_lexical": ParamSpec("float", 0.0, 1.0, 0.0, "对话上下文：多行发言整段作词面查询的权重"),
        "context_shown_out": ParamSpec("int", 0, 1, 1, "对话上下文：对话里已有的原话不作记忆召回（1 = 是）"),
    }


@pytest.mark.parametrize(
    ("values", "message", "param"),
    [
        ({"freeze_threshold": 0.2}, "不在调优白名单", "freeze_threshold"),
        ({"bm25_weight": 99.0}, "越界", "bm25_weight"),
        ({"ppr_hops": 1.5}, "需要整数", "ppr_hops"),
        ({"ppr_hops": 3.0}, "需要整数", "ppr_hops"),
        ({"ppr_alpha": True}, "需要数值", "ppr_alpha"),
        ({"ppr_alpha": "0.9"}, "需要数值", "ppr_alpha"),
        ({"ppr_alpha": None}, "需要数值", "ppr_alpha"),
        ({"ppr_alpha": float("nan")}, "越界", "ppr_alpha"),
        ({"bm25_weight": float("inf")}, "越界", "bm25_weight"),
        ({"fact_recall_limit": 0}, "越界", "fact_recall_limit"),
        ({"recent_episode_limit": 31}, "越界", "recent_episode_limit"),
    ],
)
def test_validate_errors(values: dict, message: str, param: str) -> None:  # 82
    with pytest.raises(TuningError, match=message) as info:
        validate_overrides(values)
    assert info.value.param == param
    assert param in str(info.value)
    assert isinstance(info.value, ValueError)


def test_validate_passes_and_casts() -> None:  # 82
    assert validate_overrides({"bm25_weight": 2.0, "ppr_hops": 3}) == {"bm25_weight": 2.0, "ppr_hops": 3}
    out = validate_overrides({"bm25_weight": 2, "recalled_episode_limit": 0, "ppr_alpha": 0.99})
    assert out == {"bm25_weight": 2.0, "recalled_episode_limit": 0, "ppr_alpha": 0.99}
    assert type(out["bm25_weight"]) is float and type(out["recalled_episode_limit"]) is int
    assert validate_overrides({}) == {} and validate_overrides(None) == {}
    # bounds are inclusive
    assert validate_overrides({"retention_weight_floor": 0.0, "pool_score_percentile": 0.9})


def test_tuned_value() -> None:
    assert tuned_value({"ppr_hops": 3}, "ppr_hops") == 3
    assert tuned_value({}, "ppr_hops") == 2
    assert tuned_value(None, "fact_recall_limit", 8) == 8
    with pytest.raises(TuningError):
        tuned_value({}, "nope")


def test_blend_score_defaults() -> None:  # 83
    for rel, ret in [(0, 0), (0.5, 0.3), (0.9, 1.0)]:
        assert blend_score(rel, ret) == pytest.approx(rel * (0.35 + 0.65 * ret))
    for bm25 in (-1.2, -3.4, -0.1):
        for ret in (0.0, 0.3, 0.77, 1.0):
            assert blend_score(relevance_from_bm25(bm25), ret) == score(bm25, ret)  # bit-identical
            assert blend_score(relevance_from_bm25(bm25), ret, {}) == score(bm25, ret)


def test_blend_score_overrides() -> None:  # 83
    assert blend_score(0.8, 0) == pytest.approx(0.28)
    assert blend_score(0.8, 0, {"retention_weight_floor": 0.8}) == pytest.approx(0.64)
    assert blend_score(0.5, 0.5, {"bm25_weight": 2}) == pytest.approx(0.16875)
    assert blend_score(-0.2, 1.0) == 0.0


def test_fused_relevance() -> None:
    assert (LEXICAL_WEIGHT, DENSE_WEIGHT) == (0.4, 0.6)
    assert fused_relevance(0.5, 1.0) == pytest.approx(0.8)
    assert fused_relevance(0.0, -1.0) == 0.0
    assert fused_relevance(1.0, 1.0) == pytest.approx(1.0)
    assert fused_relevance(0.5, 0.0) == pytest.approx(0.5)


def test_pool_percentile() -> None:  # 85
    assert apply_pool_percentile([0.9, 0.5, 0.1], 0) == 3
    assert apply_pool_percentile([0.9, 0.5, 0.1], 0.5) == 2
    assert apply_pool_percentile([0.9, 0.5, 0.1], 0.9) == 1
    assert apply_pool_percentile([float(i) for i in range(10, 0, -1)], 0.25) == 8
    assert apply_pool_percentile([], 0.5) == 0
    assert apply_pool_percentile([0.3, 0.3], 0.9) == 2


def test_reconcile_match() -> None:  # 90
    pool = [(11, 0.9), (12, 0.5)]
    result = reconcile_trace_pool(pool, list(pool))
    assert result.status == "match" and result.matched
    assert result.max_score_delta == 0.0
    assert result.missing == [] and result.extra == [] and result.order_changed is False


def test_reconcile_mismatch() -> None:  # 90
    result = reconcile_trace_pool([(11, 0.9), (13, 0.5)], [(11, 0.9), (12, 0.5)])
    assert result.status == "mismatch"
    assert result.missing == [12] and result.extra == [13]
    assert result.order_changed is False


def test_reconcile_order_and_scores() -> None:
    swapped = reconcile_trace_pool([(12, 0.5), (11, 0.9)], [(11, 0.9), (12, 0.5)])
    assert swapped.status == "mismatch" and swapped.order_changed
    drift = reconcile_trace_pool([(11, 0.9 + 1e-9)], [(11, 0.9)])
    assert drift.status == "mismatch" and drift.max_score_delta == pytest.approx(1e-9)
    tiny = reconcile_trace_pool([(11, 0.9 + 1e-15)], [(11, 0.9)])
    assert tiny.status == "match" and RECONCILE_SCORE_EPSILON == 1e-12
    empty = reconcile_trace_pool([], [])
    assert empty.status == "match" and empty.max_score_delta is None


def test_every_parameter_a_fit_leaves_alone_is_whitelisted() -> None:
    from memory.engine.tuning import UNFITTED

    assert UNFITTED <= set(WHITELIST)
    assert {"retention_prior", "pool_share"} <= set(WHITELIST) - UNFITTED  # the ranking's own knobs are searched
