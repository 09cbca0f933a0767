"""The one ranking function (memory/engine/scoring.py: rank) — relevance leads, forgetting is a prior.

Exact expectations; the reference's multiplicative blend stays reachable through the "reference" profile.
"""
from __future__ import annotations

import math

import pytest

from memory.engine import decay
from memory.engine.scoring import (
    DEFAULT_TOLD_GAIN,
    Gate,
    QueryMass,
    RankCandidate,
    blend_score,
    dense_term,
    fused_relevance,
    gate,
    held_back,
    idf,
    idf_coverage,
    lexical_strength,
    lexical_term,
    prompt_cut,
    rank,
)

REFERENCE = {"reference_blend": 1}
HOUR = decay.MS_PER_HOUR
DAY = 24 * HOUR


def _ids(ranked):
    return [r.id for r in ranked]


def test_reference_profile_reproduces_blend_score_exactly() -> None:
    cands = [
        RankCandidate(id="a", lexical=0.6, retention=1.0),
        RankCandidate(id="b", lexical=0.8, retention=0.0),
        RankCandidate(id="c", lexical=0.2, retention=0.5, cosine=0.7),
        RankCandidate(id="d", lexical=0.6, retention=1.0),  # ties with a: input order stays
    ]
    ranked = rank(cands, REFERENCE)
    expected = {
        "a": blend_score(0.6, 1.0),
        "b": blend_score(0.8, 0.0),
        "c": blend_score(fused_relevance(0.2, 0.7), 0.5),
        "d": blend_score(0.6, 1.0),
    }
    assert {r.id: r.score for r in ranked} == expected  # bit-identical
    assert _ids(ranked) == sorted(expected, key=lambda k: -expected[k])  # stable: a before d
    assert _ids(ranked) == ["a", "d", "c", "b"]
    assert all(r.eligible and r.mode == "reference" for r in ranked)
    knobs = {"bm25_weight": 2.0, "retention_weight_floor": 0.5}
    weighted = {r.id: r.score for r in rank(cands, {**REFERENCE, **knobs})}
    assert weighted["c"] == blend_score(fused_relevance(0.2, 0.7), 0.5, knobs)
    assert weighted["b"] == blend_score(0.8, 0.0, knobs)


def test_a_clearly_more_relevant_old_fact_beats_yesterdays_weaker_one() -> None:
    old = RankCandidate(id="old", lexical=0.8, retention=0.0)  # three months ago, forgotten
    new = RankCandidate(id="new", lexical=0.6, retention=1.0)  # yesterday
    ranked = rank([new, old])
    assert _ids(ranked) == ["old", "new"]
    assert ranked[0].calibrated == 1.0 and ranked[0].prior == 0.0 and ranked[0].score == 1.0
    # lexical terms: old 0.5 * 0.8 + 0.5 * 1 (the pool's strongest), new 0.5 * 0.6 + 0.5 * 1.5 / 4
    assert ranked[0].relevance == 0.9 and ranked[1].relevance == pytest.approx(0.5 * 0.6 + 0.5 * (1.5 / 4.0))
    assert ranked[1].calibrated == ranked[1].relevance / 0.9 and ranked[1].score == ranked[1].calibrated + 0.02
    # the reference's blend put yesterday's weaker fact first
    assert _ids(rank([new, old], REFERENCE)) == ["new", "old"]


def test_at_comparable_relevance_the_fresher_fact_wins() -> None:
    older = RankCandidate(id="older", lexical=0.800, retention=0.2)  # bm25 strength 4.0
    fresher = RankCandidate(id="fresher", lexical=0.799, retention=0.9)  # 3.98
    ranked = rank([older, fresher])
    assert _ids(ranked) == ["fresher", "older"]
    assert ranked[0].score == pytest.approx(lexical_term(0.799, 4.0, 0.5) / 0.9 + 0.02 * 0.9)
    assert ranked[1].score == 1.0 + 0.02 * 0.2
    # the margin is the prior's weight: a gap above it is no longer "comparable"
    assert _ids(rank([older, fresher], {"retention_prior": 0.0})) == ["older", "fresher"]
    # 0.80 vs 0.79 look comparable saturated (share 0) but are 4.0 vs 3.76 in bm25: the stronger leads
    saturated = [older, RankCandidate(id="fresher", lexical=0.79, retention=0.9)]
    assert _ids(rank(saturated, {"pool_share": 0.0})) == ["fresher", "older"]
    assert _ids(rank(saturated)) == ["older", "fresher"]


def test_the_lexical_term_is_the_bm25_share_of_the_pools_strongest() -> None:
    assert lexical_strength(0.8) == pytest.approx(4.0) and lexical_strength(0.0) == 0.0
    assert lexical_strength(decay.relevance_from_bm25(-2.5)) == pytest.approx(2.5)
    assert lexical_term(0.8, 4.0, 0.5) == pytest.approx(0.9)
    assert lexical_term(0.5, 4.0, 0.5) == pytest.approx(0.25 + 0.125)
    assert lexical_term(0.5, 4.0, 0.0) == 0.5 and lexical_term(0.0, 4.0, 0.5) == 0.0
    assert lexical_term(0.5, 0.0, 0.5) == 0.25  # no lexical match in the pool: no share


def test_the_dense_term_is_the_cosine_share_of_the_pools_best() -> None:
    assert dense_term(0.6, 0.6, 0.5) == pytest.approx(0.5 * 0.8 + 0.5)
    assert dense_term(0.3, 0.6, 0.5) == pytest.approx(0.5 * 0.65 + 0.25)
    assert dense_term(-0.2, 0.6, 0.5) == pytest.approx(0.5 * 0.4)  # a negative cosine has no share
    assert dense_term(0.3, 0.6, 0.0) == (0.3 + 1.0) / 2.0 and dense_term(0.3, 0.0, 0.5) == 0.5 * 0.65


def test_a_strong_lexical_match_is_not_outranked_by_a_weak_one_with_a_slightly_better_cosine() -> None:
    # bm25 8 vs 2 saturate to 0.89 vs 0.67: with absolute values the cosine decided
    strong = RankCandidate(id="strong", lexical=8 / 9, retention=0.5, cosine=0.35, coverage=0.8)
    weak = RankCandidate(id="weak", lexical=2 / 3, retention=0.5, cosine=0.65, coverage=0.6)
    assert _ids(rank([weak, strong], {"pool_share": 0.0})) == ["weak", "strong"]
    ranked = rank([weak, strong])
    assert _ids(ranked) == ["strong", "weak"]
    assert ranked[0].relevance == pytest.approx(0.4 * (0.5 * 8 / 9 + 0.5) + 0.6 * (0.5 * 0.675 + 0.5 * 0.35 / 0.65))
    assert ranked[1].relevance == pytest.approx(0.4 * (0.5 * 2 / 3 + 0.5 * 2 / 8) + 0.6 * (0.5 * 0.825 + 0.5))
    # the reference's blend ignores the knob
    assert rank([weak, strong], REFERENCE) == rank([weak, strong], {**REFERENCE, "pool_share": 0.0})


def test_a_strong_lexical_match_the_vectors_call_unrelated_does_not_jump_ahead() -> None:
    # the demo's 小林最近在忙什么: 主人最近在学做菜 matches 最近/近在 (bm25 4.4, coverage 0.6) but its
    # cosine is 0.26; 小林喜欢猫 matches only 小林 (bm25 1.6) with cosine 0.6. Both channels are read
    # against the pool, so the lexical share alone does not lift the unrelated fact above it.
    best = RankCandidate(id="japanese", lexical=9.19 / 10.19, retention=1.0, cosine=0.65, coverage=1.0)
    owner = RankCandidate(id="cooking", lexical=4.37 / 5.37, retention=1.0, cosine=0.26, coverage=0.6)
    cat = RankCandidate(id="cat", lexical=1.63 / 2.63, retention=1.0, cosine=0.6, coverage=0.4)
    assert _ids(rank([best, owner, cat])) == ["japanese", "cat", "cooking"]
    ranked = {r.id: r for r in rank([best, owner, cat])}
    assert ranked["cat"].calibrated - ranked["cooking"].calibrated > 0.1  # not a near tie
    # absolute values (share 0) keep the same order
    assert _ids(rank([best, owner, cat], {"pool_share": 0.0})) == ["japanese", "cat", "cooking"]



def test_a_state_fact_fades_within_days() -> None:
    now = 10 * DAY
    said = now - 3 * DAY
    state = decay.retention(1.0, said, decay.half_life_for("状态"), now)  # 12 h half-life: 2**-6
    habit = decay.retention(1.0, said, decay.half_life_for("习惯"), now)
    assert state == 2.0**-6
    ranked = rank([
        RankCandidate(id="state", lexical=0.7, retention=state),
        RankCandidate(id="habit", lexical=0.7, retention=habit),
    ])
    assert _ids(ranked) == ["habit", "state"]
    assert ranked[1].prior == 0.02 * 2.0**-6


def test_frozen_facts_rank_below_active_ones_of_comparable_relevance() -> None:
    frozen = RankCandidate(id="frozen", lexical=0.7, retention=0.12, active=False)
    active = RankCandidate(id="active", lexical=0.7, retention=0.12)
    ranked = rank([frozen, active])
    assert _ids(ranked) == ["active", "frozen"]
    assert ranked[1].prior == 0.0 and ranked[0].prior == 0.02 * 0.12


def test_a_pinned_fact_keeps_its_place() -> None:
    now = 400 * DAY
    pinned = decay.retention(1.0, 0, decay.PIN_HALF_LIFE_HOURS, now)
    event = decay.retention(1.0, 0, decay.half_life_for("事件"), now)
    ranked = rank([
        RankCandidate(id="event", lexical=0.7, retention=event),
        RankCandidate(id="pinned", lexical=0.7, retention=pinned),
    ])
    assert _ids(ranked) == ["pinned", "event"]
    assert pinned > 0.99


def test_idf_coverage_counts_only_achievable_terms() -> None:
    dfs = {"最近": 5, "杭州": 2, "想": 0, "我最": 0}
    assert idf(0, 48) == 0.0
    assert idf(5, 48) == math.log(1 + 43.5 / 5.5)
    share = idf(5, 48) / (idf(5, 48) + idf(2, 48))
    assert idf_coverage(["最近"], dfs, 48) == share
    assert share == pytest.approx(0.4236, abs=1e-4)
    assert idf_coverage(["最近", "杭州"], dfs, 48) == 1.0
    assert idf_coverage(["想"], dfs, 48) == 0.0
    assert idf_coverage([], {"想": 0}, 48) == 0.0


def test_a_term_held_in_part_counts_its_share_of_the_mass() -> None:
    mass = QueryMass.of({"部手机": 3, "型号": 1}, 40)
    whole, rare = idf(3, 40), idf(1, 40)
    assert mass.credited({"部手机": 1.0}) == mass.coverage(["部手机"]) == whole / (whole + rare)
    assert mass.credited({"部手机": 0.5}) == 0.5 * whole / (whole + rare)
    assert mass.credited({"部手机": 2.0, "型号": -1.0, "别的": 1.0}) == mass.coverage(["部手机"])  # clipped, unknown ignored
    assert QueryMass.of({}, 40).credited({"型号": 1.0}) == 0.0


def test_a_pool_matching_only_generic_words_brings_nothing() -> None:
    # 早上好 against 主人每天早上跑步 / 主人早上喝咖啡 / 主人最近在学做菜: the line sits on the background bank
    # (0.85), the facts far below it, and 早上 is a generic chat word (coverage of the informative mass 0)
    pool = [
        RankCandidate(id="run", lexical=0.74, retention=1.0, coverage=0.0, cosine=0.40, margin=0.40 - 0.85),
        RankCandidate(id="coffee", lexical=0.74, retention=1.0, coverage=0.0, cosine=0.36, margin=0.36 - 0.85),
        RankCandidate(id="cook", lexical=0.0, retention=1.0, coverage=0.0, cosine=0.06, margin=0.06 - 0.85),
    ]
    ranked = rank(pool)
    assert [r.eligible for r in ranked] == [False] * 3 and [r.gate for r in ranked] == [Gate.HELD] * 3
    assert prompt_cut(ranked, 6) == [] and held_back(ranked, 6) == []
    # under the reference all would fill the prompt
    assert _ids(prompt_cut(rank(pool, REFERENCE), 6)) == ["run", "coffee", "cook"]
    # had 跑步 stood clearly ahead of the others, it alone would pass (it leads the dense channel)
    assert [r.gate for r in rank(pool[:1] + pool[2:])] == [Gate.LEADS_DENSE, Gate.HELD]


def _c(i, cosine=None, margin=None, coverage=None, lexical=0.0):
    return RankCandidate(id=i, lexical=lexical, retention=1.0, cosine=cosine, margin=margin, coverage=coverage)


def test_the_dense_side_reads_the_cosine_against_the_querys_background() -> None:
    # a question far from small talk (background 0.33): moderate cosines pass, ones 0.2 below it do not
    # unless the query asks for memory and they lie within dense_spread of its best candidate
    bg = 0.33
    pool = [_c("lake", 0.47, 0.47 - bg), _c("cook", 0.19, 0.19 - bg), _c("far", 0.10, 0.10 - bg)]
    profile = {"dense_margin": -0.1, "query_margin": -0.3, "dense_spread": 0.2, "lead_gap": 1.0}
    assert gate(pool, profile) == [Gate.DENSE, Gate.HELD, Gate.HELD]
    assert gate(pool, {**profile, "dense_spread": 0.3}) == [Gate.DENSE, Gate.DENSE, Gate.HELD]
    assert gate(pool, {**profile, "dense_margin": -0.2}) == [Gate.DENSE, Gate.DENSE, Gate.HELD]
    # the same cosines for a line that sits on the bank (background 0.9): nothing asks for memory
    loud = [_c("lake", 0.47, 0.47 - 0.9), _c("cook", 0.19, 0.19 - 0.9)]
    assert gate(loud, {**profile, "dense_spread": 0.3}) == [Gate.HELD, Gate.HELD]


def test_the_gate_is_the_same_rule_for_a_line_and_a_pasted_history() -> None:
    # a long text has lower cosines with everything — memories and the bank alike: the margins decide
    line = [_c(1, 0.62, 0.62 - 0.30), _c(2, 0.35, 0.35 - 0.30), _c(3, 0.05, 0.05 - 0.30)]
    history = [_c(1, 0.31, 0.31 - 0.15), _c(2, 0.10, 0.10 - 0.15), _c(3, -0.20, -0.20 - 0.15)]
    profile = {"lead_gap": 1.0, "dense_spread": 0.0}
    assert gate(line, profile) == gate(history, profile) == [Gate.DENSE, Gate.DENSE, Gate.HELD]


def test_the_lexical_side_is_a_share_of_the_best_candidates_informative_coverage() -> None:
    pool = [_c("a", coverage=0.8, lexical=0.5), _c("b", coverage=0.3, lexical=0.4), _c("c", coverage=0.05, lexical=0.4)]
    assert gate(pool, {"lexical_share": 0.25, "lead_ratio": 100.0}) == [Gate.LEXICAL, Gate.LEXICAL, Gate.HELD]
    assert gate(pool, {"lexical_share": 0.5, "lead_ratio": 100.0}) == [Gate.LEXICAL, Gate.HELD, Gate.HELD]
    # no informative word matched anywhere: nothing passes lexically, however strong the bm25
    assert gate([_c("x", coverage=0.0, lexical=0.9)], {"lexical_share": 0.0}) == [Gate.HELD]
    # nothing known at all: kept
    assert gate([_c("y", lexical=0.3)]) == [Gate.UNKNOWN]


def test_a_clear_leader_of_a_channel_is_never_dropped() -> None:
    # dense: far below the background, but 0.2 ahead of the runner-up
    pool = [_c("top", 0.30, 0.30 - 0.9), _c("next", 0.10, 0.10 - 0.9)]
    assert gate(pool, {"lead_gap": 0.15}) == [Gate.LEADS_DENSE, Gate.HELD]
    assert gate(pool, {"lead_gap": 0.25}) == [Gate.HELD, Gate.HELD]
    # lexical: three times the runner-up's bm25 strength, matching an informative word
    strong, weak = 3.0 / 4.0, 1.0 / 2.0  # strengths 3 and 1
    pool = [_c("top", coverage=0.01, lexical=strong), _c("next", coverage=0.9, lexical=weak)]
    assert gate(pool, {"lead_ratio": 2.0, "lexical_share": 0.5}) == [Gate.LEADS_LEXICAL, Gate.LEXICAL]
    assert gate(pool, {"lead_ratio": 4.0, "lexical_share": 0.5}) == [Gate.HELD, Gate.LEXICAL]
    assert gate([_c("top", coverage=0.0, lexical=strong), _c("n", coverage=0.0, lexical=weak)]) == [Gate.HELD] * 2
    # a lone candidate leads nothing
    assert gate([_c("only", 0.3, 0.3 - 0.9)]) == [Gate.HELD]


def test_without_a_background_the_dense_side_admits_what_lies_near_the_best() -> None:
    pool = [_c("a", 0.5), _c("b", 0.45), _c("c", 0.1)]
    assert gate(pool, {"dense_spread": 0.3}) == [Gate.DENSE, Gate.DENSE, Gate.HELD]
    assert gate([_c("a", 0.7), _c("b", 0.2)], {"dense_spread": 0.3}) == [Gate.LEADS_DENSE, Gate.HELD]


def test_calibration_is_relative_to_the_best_eligible_candidate() -> None:
    ranked = rank([
        RankCandidate(id="noise", lexical=0.9, retention=1.0, coverage=0.05),
        RankCandidate(id="hit", lexical=0.6, retention=0.5, coverage=0.8),
        RankCandidate(id="near", lexical=0.3, retention=1.0, coverage=0.6),
    ], {"lead_ratio": 100.0})
    assert _ids(ranked) == ["hit", "near", "noise"]  # ineligible last, whatever its score
    terms = [lexical_term(x, lexical_strength(0.9), 0.5) for x in (0.6, 0.3, 0.9)]
    assert [r.calibrated for r in ranked] == [1.0, terms[1] / terms[0], terms[2] / terms[0]]
    assert [r.eligible for r in ranked] == [True, True, False]


def test_held_back_lists_what_retention_ranked_out() -> None:
    ranked = rank([
        RankCandidate(id="old", lexical=0.800, retention=0.0),
        RankCandidate(id="fresh", lexical=0.799, retention=1.0),
        RankCandidate(id="weak", lexical=0.3, retention=1.0),
    ])
    assert _ids(prompt_cut(ranked, 1)) == ["fresh"]
    assert _ids(held_back(ranked, 1)) == ["old"]
    assert held_back(ranked, 2) == []
    assert _ids(held_back(rank([
        RankCandidate(id="old", lexical=0.80, retention=0.0),
        RankCandidate(id="fresh", lexical=0.5, retention=1.0),
    ], REFERENCE), 1)) == ["old"]


def test_terms_are_exposed() -> None:
    r = rank([RankCandidate(id=7, lexical=0.4, retention=0.5, cosine=0.6, coverage=0.7)])[0]
    assert r.terms() == {
        "relevance": 0.4 * (0.5 * 0.4 + 0.5) + 0.6 * (0.5 * 0.8 + 0.5), "calibrated": 1.0, "prior": 0.01, "score": 1.01,
        "retention": 0.5, "eligible": True, "coverage": 0.7, "cosine": 0.6, "mode": "relevance", "margin": None,
        "gate": Gate.DENSE, "timed": False, "told": 0.0,
    }


def test_every_candidate_gets_a_verdict() -> None:
    from memory.engine.scoring import Verdict, verdicts

    ranked = rank([
        RankCandidate(id="old", lexical=0.800, retention=0.0, coverage=1.0),
        RankCandidate(id="fresh", lexical=0.799, retention=1.0, coverage=1.0),
        RankCandidate(id="third", lexical=0.5, retention=1.0, coverage=0.9),
        RankCandidate(id="chat", lexical=0.3, retention=1.0, coverage=0.0),
    ], {"lead_ratio": 100.0})
    assert verdicts(ranked, 1) == {
        "fresh": Verdict.PROMPT, "old": Verdict.FORGETTING, "third": Verdict.LIMIT, "chat": Verdict.GATE,
    }
    assert verdicts(ranked, 3) == {
        "fresh": Verdict.PROMPT, "old": Verdict.PROMPT, "third": Verdict.PROMPT, "chat": Verdict.GATE,
    }


def test_a_line_that_asks_for_no_memory_passes_nothing_lexically() -> None:
    # 晚上好 against facts holding 晚上 (not a word of the bank): the lexical side alone would let them
    # through, but the line's background says it asks for nothing — unless there is no background
    chat = [_c("a", 0.30, 0.30 - 0.9, coverage=1.0, lexical=0.6), _c("b", 0.25, 0.25 - 0.9, coverage=1.0, lexical=0.6)]
    assert gate(chat) == [Gate.HELD, Gate.HELD]
    lexical_only = [_c("a", coverage=1.0, lexical=0.6), _c("b", coverage=1.0, lexical=0.6)]
    assert gate(lexical_only) == [Gate.LEXICAL, Gate.LEXICAL]


def test_where_it_was_told_lifts_by_told_gain_and_never_opens_the_gate() -> None:
    pool = [
        RankCandidate(id="said", lexical=0.5, retention=1.0, coverage=0.4, told=1.0),
        RankCandidate(id="plain", lexical=0.6, retention=1.0, coverage=0.5),
        RankCandidate(id="held", lexical=0.0, retention=1.0, coverage=0.0, told=1.0),
    ]
    by_id = {r.id: r for r in rank(pool)}
    assert by_id["said"].score == pytest.approx(by_id["said"].calibrated + by_id["said"].prior + DEFAULT_TOLD_GAIN)
    assert by_id["said"].told == 1.0 and by_id["plain"].told == 0.0
    assert _ids(prompt_cut(rank(pool), 1)) == ["said"]  # the lift beats a slightly better match
    assert _ids(prompt_cut(rank(pool, {"told_gain": 0.0}), 1)) == ["plain"]
    assert not by_id["held"].eligible  # the gate does not read it
    assert _ids(prompt_cut(rank(pool, REFERENCE), 1)) == ["plain"]  # the reference ranking has no such term
