"""Ranking arithmetic shared by every recall path — one function, :func:`rank`.

Every path that orders facts (turn prepare/confirm, ``/actions/recall``, the console
playground and fact search, trace replay, ``make eval``) builds :class:`RankCandidate`
rows (lexical relevance, IDF coverage, cosine, retention — never vectors) and calls
:func:`rank`; a change of formula is one change here.

* lexical relevance: :func:`memory.engine.decay.relevance_from_bm25` (0..1);
* dense fusion (only when both vectors exist): :func:`fused_relevance`
  ``= 0.4 * lexical + 0.6 * (cos + 1) / 2`` — not tunable;
* default ("relevance leads, forgetting is a prior"): each channel is read against the
  pool (``pool_share``): the lexical side mixes ``relevance_from_bm25`` with the
  candidate's bm25 as a share of the pool's strongest (:func:`lexical_term`), the dense
  side ``(cos + 1) / 2`` with the cosine as a share of the pool's best (:func:`dense_term`),
  fused ``0.4 / 0.6`` as above; relevance is calibrated within the
  pool (share of the best eligible candidate), the retention term is a bounded prior
  ``retention_prior * retention`` (0 when frozen), and candidates the relevance gate
  (:func:`gate`) holds back never enter the prompt — the gate is calibrated per query: the
  cosine is read against the query's own background (its best cosine with a bank of generic
  chat lines, :mod:`memory.engine.background`), the lexical match as a share of the best
  candidate's coverage of the query's informative words, and a clear leader of either
  channel always passes;
* the reference ranking's multiplicative blend stays as :func:`blend_score`
  ``= max(0, relevance) ** bm25_weight * (floor + (1 - floor) * retention)``, used by
  :func:`rank` under the built-in "reference" profile (``reference_blend = 1``; docs/REFERENCE.md);
* the candidate pool may be cut by a score percentile: :func:`apply_pool_percentile`.
"""

from __future__ import annotations

import math
from collections.abc import Container, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LEXICAL_WEIGHT",
    "DENSE_WEIGHT",
    "DEFAULT_BM25_WEIGHT",
    "DEFAULT_RETENTION_WEIGHT_FLOOR",
    "DEFAULT_TOLD_GAIN",
    "DEFAULT_TOLD_WINDOW",
    "blend_score",
    "fused_relevance",
    "apply_pool_percentile",
    "REFERENCE_BLEND_PARAM",
    "RankCandidate",
    "RankedCandidate",
    "is_reference_profile",
    "idf",
    "QueryMass",
    "idf_coverage",
    "share_held",
    "holds_rarest",
    "Gate",
    "gate",
    "Verdict",
    "verdicts",
    "lexical_strength",
    "lexical_term",
    "dense_term",
    "rank",
    "prompt_cut",
    "held_back",
]

LEXICAL_WEIGHT: float = 0.4
DENSE_WEIGHT: float = 0.6
DEFAULT_BM25_WEIGHT: float = 1.0
DEFAULT_RETENTION_WEIGHT_FLOOR: float = 0.35


def blend_score(relevance: float, retention: float, overrides: Mapping[str, float] | None = None) -> float:
    """Final score of a candidate: ``max(0, relevance) ** w * (f + (1 - f) * retention)``.

    ``w = overrides['bm25_weight']`` (default 1.0), ``f = overrides['retention_weight_floor']``
    (default 0.35). With the defaults the result is bit-identical to
    ``decay.score(bm25, retention)`` when ``relevance = relevance_from_bm25(bm25)``.
    ``overrides`` are expected to be validated already (see ``tuning.validate_overrides``).
    """
    opts = overrides or {}
    weight = float(opts.get("bm25_weight", DEFAULT_BM25_WEIGHT))
    floor = float(opts.get("retention_weight_floor", DEFAULT_RETENTION_WEIGHT_FLOOR))
    rel = max(0.0, relevance)
    if weight != 1.0:
        rel = rel**weight
    return rel * (floor + (1.0 - floor) * retention)


def fused_relevance(lexical: float, cosine: float) -> float:
    """Lexical/dense fusion: ``0.4 * lexical + 0.6 * ((cosine + 1) / 2)``; in ``[0, 1]`` for valid inputs."""
    return LEXICAL_WEIGHT * lexical + DENSE_WEIGHT * ((cosine + 1.0) / 2.0)


def apply_pool_percentile(scores: Sequence[float], threshold: float) -> int:
    """How many entries of a (descending) candidate pool survive a percentile cut.

    ``threshold <= 0`` or empty → ``len(scores)``; else ``cut = sorted(scores)[min(n-1,
    int(threshold*n))]`` and the result is ``max(1, #{s >= cut})``. Callers keep that
    many entries from the head of their descending pool.
    """
    n = len(scores)
    if threshold <= 0 or n == 0:
        return n
    cut = sorted(scores)[min(n - 1, int(threshold * n))]
    return max(1, sum(1 for s in scores if s >= cut))


# --- the one ranking function ------------------------------------------------------------

#: Profile knob that selects the reference ranking (``blend_score``, docs/REFERENCE.md) — the
#: built-in "reference" profile sets it to 1.
REFERENCE_BLEND_PARAM: str = "reference_blend"
DEFAULT_RETENTION_PRIOR: float = 0.02
#: The relevance gate (:func:`gate`), chosen on dev splits (``make eval``; BENCHMARKS.md says which):
#: a candidate's cosine may lie this far *below* the query's background (its best cosine with
#: the bank of generic chat lines) and still pass. Small talk sits on the bank (a high
#: background) and brings nothing; a question sits far from it and keeps its moderate matches.
DEFAULT_DENSE_MARGIN: float = -0.2
#: A query whose best candidate stands out of its background by this much asks for memory: its
#: candidates within ``dense_spread`` of that best cosine pass too.
DEFAULT_QUERY_MARGIN: float = -0.3
DEFAULT_DENSE_SPREAD: float = 0.3
#: A lexical candidate passes when it covers this share of the best candidate's coverage of
#: the query's informative words (generic chat words carry none).
DEFAULT_LEXICAL_SHARE: float = 0.1
#: A clear leader passes whatever the rest of the gate says: the dense channel's top candidate
#: when its cosine beats the runner-up's by this much, the lexical channel's top one when its
#: bm25 strength is this many times the runner-up's (and it matches an informative word).
DEFAULT_LEAD_GAP: float = 0.15
DEFAULT_LEAD_RATIO: float = 2.0
#: Weight of "a channel's value as a share of the pool's best" in each side of the fusion
#: (:func:`lexical_term`, :func:`dense_term`). ``r/(1+r)`` saturates on long queries (bm25 8 and
#: 2 give 0.89 and 0.67), so with absolute values alone the cosine decided between a strong and
#: a weak lexical match; reading both channels against the pool keeps them balanced (a strong
#: bm25 match the vectors call unrelated does not jump ahead). Measured on LoCoMo through the
#: API (BENCHMARKS.md): 0.5 lifts R@5 mostly on single-hop and adversarial questions.
DEFAULT_POOL_SHARE: float = 0.5
#: Added to the score of a candidate dated inside the window the query names
#: (:func:`memory.engine.when.query_window`: "in October 2023", "2023年10月13日"). Chosen on LoCoMo's dev
#: conversations (0.05, 0.1, 0.2, 0.5 tried; 0.2 the smallest with the best R@5).
DEFAULT_TIME_BOOST: float = 0.2
#: Added, times the candidate's ``told`` (the share of the query's informative IDF mass that the
#: conversation around the message the fact was heard in holds: memory/selectors/told.py), to its
#: score. A fact is a paraphrase; the words of the question are often in what was said around it.
#: Chosen on LoCoMo's dev conversations through the API (``python -m bench.eval_matrix --datasets LoCoMo
#: --profile '{"told_gain": g}'``: 0, 0.2, 0.3, 0.5, 0.7, 1.0 gave dev R@5 0.572, 0.602, 0.603, 0.606, 0.610,
#: 0.608). A whole gain of 0.7 for a conversation that holds every informative word of the question: a fact is
#: what was said there, and the evidence of a question is mostly where its words were said.
DEFAULT_TOLD_GAIN: float = 0.7
#: How many messages before and after the one a fact was heard in make up "where it was told"
#: (within one conversation: a silence of ``context_gap_minutes`` ends it). Chosen offline on LoCoMo's
#: dev conversations (``python -m bench.eval_session_prior``: 0, 1, 2, 4, 8 tried; 2 best at every gain).
DEFAULT_TOLD_WINDOW: int = 2


@dataclass(frozen=True)
class RankCandidate:
    """What the ranking needs of one candidate — no vectors: the cosine is computed upstream.

    ``lexical`` is ``relevance_from_bm25`` (0 when the candidate does not match lexically);
    ``coverage`` the share of the query's informative IDF mass the candidate matches
    (:func:`idf_coverage`; ``None`` = not known, the lexical side of the gate does not apply);
    ``rarest`` True when it holds the query's most specific word (:func:`holds_rarest`);
    ``cosine`` the query/fact cosine (``None`` = no vector on either side); ``margin`` that
    cosine minus the query's background (``None`` = no background known: the dense side of
    the gate does not apply); ``active`` False for a frozen fact; ``timed`` True when the fact is
    dated inside the window the query names (:mod:`memory.engine.when`); ``told`` in ``[0, 1]`` the
    share of the query's informative IDF mass that the conversation the fact was heard in holds
    (:mod:`memory.selectors.told`; 0: none, or not known).
    """

    id: Hashable
    lexical: float
    retention: float
    cosine: float | None = None
    coverage: float | None = None
    active: bool = True
    rarest: bool = False
    margin: float | None = None
    timed: bool = False
    told: float = 0.0


@dataclass(frozen=True)
class RankedCandidate:
    """A candidate with every term of its score.

    ``relevance`` = fused relevance (with a cosine) or the lexical one (default: the lexical
    and dense sides are :func:`lexical_term` and :func:`dense_term`; reference: ``fused_relevance``
    of the raw values); ``calibrated`` =
    ``relevance ** bm25_weight`` divided by the best eligible one of the pool (reference: the
    powered relevance itself); ``prior`` = the retention term (default: ``retention_prior *
    retention``, 0 when frozen; reference: ``floor + (1 - floor) * retention``); ``score`` =
    ``calibrated + prior`` (reference: ``calibrated * prior`` = ``blend_score``). ``eligible`` is
    False when the candidate is under both relevance floors — it never enters the prompt.
    """

    id: Hashable
    relevance: float
    calibrated: float
    prior: float
    score: float
    retention: float
    eligible: bool = True
    coverage: float | None = None
    cosine: float | None = None
    mode: str = "relevance"
    margin: float | None = None
    gate: str = ""  # why the gate let it pass, or why it held it back (:class:`Gate`)
    timed: bool = False  # dated inside the window the query names: ``time_boost`` added to the score
    told: float = 0.0  # where it was told matches the query: ``told_gain * told`` added to the score

    def terms(self) -> dict[str, Any]:
        return {
            "relevance": self.relevance, "calibrated": self.calibrated, "prior": self.prior, "score": self.score,
            "retention": self.retention, "eligible": self.eligible, "coverage": self.coverage,
            "cosine": self.cosine, "mode": self.mode, "margin": self.margin, "gate": self.gate, "timed": self.timed,
            "told": self.told,
        }


def is_reference_profile(profile: Mapping[str, float] | None) -> bool:
    """True iff the profile asks for the reference ranking (``blend_score``)."""
    return bool(profile) and int(profile.get(REFERENCE_BLEND_PARAM, 0)) == 1  # type: ignore[union-attr]


def idf(df: int, n_docs: int) -> float:
    """``ln(1 + (N - df + 0.5) / (df + 0.5))`` — BM25's IDF kept positive (0 when ``df <= 0``)."""
    if df <= 0:
        return 0.0
    return math.log(1.0 + (max(n_docs, df) - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class QueryMass:
    """A query's IDF mass, computed once for all its candidates (:func:`idf_coverage`,
    :func:`holds_rarest` of each, the same numbers).

    ``dfs`` maps every query term to its document frequency; terms no memory contains
    (``df == 0``) cannot be matched by any candidate and are left out of the mass.
    """

    idfs: Mapping[str, float]  # every query term's idf, in the order of ``dfs``
    total: float
    rarest: int | None  # the smallest positive document frequency (None: no term occurs)
    dfs: Mapping[str, int]

    @classmethod
    def of(cls, dfs: Mapping[str, int], n_docs: int) -> QueryMass:
        idfs = {t: idf(df, n_docs) for t, df in dfs.items()}
        known = [df for df in dfs.values() if df > 0]
        return cls(idfs, sum(idfs.values()), min(known) if known else None, dfs)

    def coverage(self, matched: Iterable[str]) -> float:
        """Share of the achievable mass that a candidate holding ``matched`` (query terms) matches,
        in ``[0, 1]``; 0 when no term is achievable."""
        if self.total <= 0:
            return 0.0
        got = sum(self.idfs[t] for t in set(matched) if t in self.idfs)
        return min(1.0, got / self.total)

    def credited(self, credit: Mapping[str, float]) -> float:
        """:meth:`coverage` with partial matches: ``credit`` maps a query term to the share of it a
        candidate holds (1 = the whole term; a long word jieba cut otherwise in the candidate may be
        held in part, :func:`memory.selectors.fact_coverages`), each share clipped to ``[0, 1]``."""
        if self.total <= 0:
            return 0.0
        got = sum(self.idfs[t] * min(1.0, max(0.0, share)) for t, share in credit.items() if t in self.idfs)
        return min(1.0, got / self.total)

    def holds_rarest(self, matched: Iterable[str]) -> bool:
        """True iff ``matched`` holds a query word of the smallest positive document frequency —
        the most specific thing the query asks that memory could answer."""
        return self.rarest is not None and any(self.dfs.get(t, 0) == self.rarest for t in set(matched))


def share_held(grams: Sequence[str], held: Container[str]) -> float:
    """The share of a word's CJK pairs (``grams``: those some memory holds) that ``held`` holds — the
    credit of a word held in part (:meth:`QueryMass.credited`); 0 without pairs."""
    return sum(g in held for g in grams) / len(grams) if grams else 0.0


def idf_coverage(matched: Iterable[str], dfs: Mapping[str, int], n_docs: int) -> float:
    """Share of the query's achievable IDF mass that a candidate matches, in ``[0, 1]``
    (:meth:`QueryMass.coverage`; ``matched`` = the query terms the candidate contains)."""
    return QueryMass.of(dfs, n_docs).coverage(matched)


def holds_rarest(matched: Iterable[str], dfs: Mapping[str, int]) -> bool:
    """:meth:`QueryMass.holds_rarest` (the document count plays no part)."""
    return QueryMass.of(dfs, 0).holds_rarest(matched)


def _param(profile: Mapping[str, float], name: str, default: float) -> float:
    return float(profile.get(name, default))


def lexical_strength(lexical: float) -> float:
    """The bm25 strength ``r = -bm25`` behind a lexical relevance ``r / (1 + r)`` (its inverse;
    0 for no match). A context hit's scaled relevance maps to a proportionally weaker strength."""
    rel = min(max(0.0, lexical), 1.0 - 1e-12)
    return rel / (1.0 - rel)


def lexical_term(lexical: float, best_strength: float, share: float) -> float:
    """The lexical side of a candidate's relevance: ``(1 - share) * lexical + share * r / r_best``.

    ``r`` is the candidate's bm25 strength (:func:`lexical_strength`), ``r_best`` the pool's
    strongest; ``share = 0`` gives back ``lexical`` itself. In ``[0, 1]``.
    """
    if share <= 0:
        return lexical
    ratio = lexical_strength(lexical) / best_strength if best_strength > 0 else 0.0
    return (1.0 - share) * lexical + share * ratio


def dense_term(cosine: float, best_cosine: float, share: float) -> float:
    """The dense side of a candidate's relevance: ``(1 - share) * (cos + 1) / 2 + share *
    max(0, cos) / best_cosine`` (``best_cosine`` = the pool's highest; no share when it is not
    positive). ``share = 0`` gives back ``(cos + 1) / 2``, the reference ranking's dense side."""
    base = (cosine + 1.0) / 2.0
    if share <= 0:
        return base
    ratio = max(0.0, cosine) / best_cosine if best_cosine > 0 else 0.0
    return (1.0 - share) * base + share * ratio


class Gate:
    """The gate's reasons, as :attr:`RankedCandidate.gate` carries them (the console and the trace show
    them): a candidate passes because it ``leads`` a channel, stands out of the query's background
    (``dense``), covers enough of the best candidate's informative words (``lexical``), or because
    nothing is known to judge it by (``unknown``); it is held back (``held``) otherwise. The reference
    ranking has no gate (``reference``)."""

    LEADS_DENSE = "leads_dense"
    LEADS_LEXICAL = "leads_lexical"
    DENSE = "dense"
    LEXICAL = "lexical"
    UNKNOWN = "unknown"
    HELD = "held"
    REFERENCE = "reference"
    PASSING = frozenset({LEADS_DENSE, LEADS_LEXICAL, DENSE, LEXICAL, UNKNOWN, REFERENCE})


def gate(candidates: Sequence[RankCandidate], profile: Mapping[str, float] | None = None) -> list[str]:
    """The relevance gate of a pool: one :class:`Gate` reason per candidate, calibrated on this query.

    A candidate passes when

    * it clearly leads a channel: the highest cosine of the pool, ahead of the runner-up by
      ``lead_gap``; or the strongest bm25 of the pool, ``lead_ratio`` times the runner-up's,
      matching an informative word (``coverage > 0``);
    * its cosine stands out of the query's background: ``margin = cosine - background >=
      dense_margin`` (the background = the query's best cosine with generic chat lines);
    * the query asks for memory — its best candidate's margin is at least ``query_margin`` —
      and its cosine lies within ``dense_spread`` of that best candidate's;
    * it covers ``lexical_share`` of what the best candidate covers of the query's informative
      IDF mass (``coverage > 0``: generic chat words are not informative) — unless the query's
      background says it asks for no memory at all (then only a leader passes);
    * nothing is known about it (no coverage, no cosine).

    Every part is relative to the query — its own background, its own best candidates — so a
    two-character greeting, a paragraph and a pasted history are judged alike. Without a
    background (no bank vectors: ``margin`` None) only the relative part of the dense side
    applies: candidates within ``dense_spread`` of the best cosine.
    """
    opts = profile or {}
    margin_min = _param(opts, "dense_margin", DEFAULT_DENSE_MARGIN)
    query_min = _param(opts, "query_margin", DEFAULT_QUERY_MARGIN)
    spread = _param(opts, "dense_spread", DEFAULT_DENSE_SPREAD)
    share = _param(opts, "lexical_share", DEFAULT_LEXICAL_SHARE)
    gap = _param(opts, "lead_gap", DEFAULT_LEAD_GAP)
    ratio = _param(opts, "lead_ratio", DEFAULT_LEAD_RATIO)
    n = len(candidates)
    reasons = [Gate.HELD] * n
    dense = sorted((i for i, c in enumerate(candidates) if c.cosine is not None), key=lambda i: -candidates[i].cosine)
    if dense and (len(dense) == 1 or candidates[dense[0]].cosine - candidates[dense[1]].cosine >= gap):
        if len(dense) > 1:  # a lone candidate leads nothing
            reasons[dense[0]] = Gate.LEADS_DENSE
    strength = [lexical_strength(c.lexical) for c in candidates]
    lexical = sorted((i for i in range(n) if strength[i] > 0), key=lambda i: -strength[i])
    if len(lexical) > 1 and strength[lexical[0]] >= ratio * strength[lexical[1]]:
        top = lexical[0]
        if (candidates[top].coverage or 0.0) > 0 and reasons[top] == Gate.HELD:
            reasons[top] = Gate.LEADS_LEXICAL
    best_coverage = max((c.coverage for c in candidates if c.coverage is not None), default=0.0)
    best = candidates[dense[0]] if dense else None  # the highest cosine of the pool
    # the query asks for memory when its best candidate stands out of its background (no background: unknown, assumed)
    asks = best is None or best.margin is None or best.margin >= query_min
    for i, c in enumerate(candidates):
        if reasons[i] != Gate.HELD:
            continue
        if c.cosine is not None and (
            (c.margin is not None and c.margin >= margin_min)
            or (asks and best is not None and best.cosine - c.cosine <= spread)
        ):
            reasons[i] = Gate.DENSE
        elif asks and c.coverage is not None and c.coverage > 0 and c.coverage >= share * best_coverage:
            reasons[i] = Gate.LEXICAL
        elif c.coverage is None and c.cosine is None:
            reasons[i] = Gate.UNKNOWN
    return reasons


def rank(
    candidates: Sequence[RankCandidate], profile: Mapping[str, float] | None = None, *,
    reasons: Sequence[str] | None = None,
) -> list[RankedCandidate]:
    """Score and order a candidate pool — the one ranking every recall path calls.

    ``reasons`` — :func:`gate` of these candidates under this profile, when the caller has it already
    (it reads no term the gate does not: ``told`` and ``timed`` may change after it).

    Default ("relevance leads, forgetting is a prior"): candidates the relevance gate holds
    back (:func:`gate`) are not eligible; the lexical side is
    :func:`lexical_term` and the dense side :func:`dense_term` (the pool's strongest bm25 and
    best cosine as references, weight ``pool_share``), fused ``LEXICAL_WEIGHT * lexical +
    DENSE_WEIGHT * dense`` when there is a cosine; ``calibrated =
    relevance ** w / max(eligible relevance ** w)``; ``score = calibrated +
    retention_prior * retention`` (frozen: prior 0), plus ``time_boost`` for a candidate dated
    inside the window the query names (``timed``), plus ``told_gain * told`` (where it was told
    matches the query; the gate does not read it). A candidate more relevant by more
    than ``retention_prior`` (as a share of the pool's best) wins whatever its age; within
    that margin the fresher / stronger one wins.

    Reference profile (``reference_blend = 1``): ``score = blend_score(relevance, retention)``,
    every candidate eligible — today's ranking, bit for bit.

    Order: eligible candidates by score (stable: input order breaks ties), then the
    ineligible ones by score.
    """
    opts = profile or {}
    weight = _param(opts, "bm25_weight", DEFAULT_BM25_WEIGHT)
    out: list[RankedCandidate] = []
    if is_reference_profile(opts):
        floor = _param(opts, "retention_weight_floor", DEFAULT_RETENTION_WEIGHT_FLOOR)
        for c in candidates:
            rel = fused_relevance(c.lexical, c.cosine) if c.cosine is not None else c.lexical
            powered = max(0.0, rel) ** weight if weight != 1.0 else max(0.0, rel)
            out.append(
                RankedCandidate(
                    id=c.id, relevance=rel, calibrated=powered, prior=floor + (1.0 - floor) * c.retention,
                    score=blend_score(rel, c.retention, opts), retention=c.retention, eligible=True,
                    coverage=c.coverage, cosine=c.cosine, mode="reference", margin=c.margin, gate=Gate.REFERENCE,
                )
            )
        out.sort(key=lambda r: r.score, reverse=True)
        return out
    beta = _param(opts, "retention_prior", DEFAULT_RETENTION_PRIOR)
    boost = _param(opts, "time_boost", DEFAULT_TIME_BOOST)
    told_gain = _param(opts, "told_gain", DEFAULT_TOLD_GAIN)
    share = _param(opts, "pool_share", DEFAULT_POOL_SHARE)
    best_strength = max((lexical_strength(c.lexical) for c in candidates), default=0.0)
    best_cosine = max((c.cosine for c in candidates if c.cosine is not None), default=0.0)
    rels = []
    for c in candidates:
        lx = lexical_term(c.lexical, best_strength, share)
        if c.cosine is None:
            rels.append(lx)
        else:
            rels.append(LEXICAL_WEIGHT * lx + DENSE_WEIGHT * dense_term(c.cosine, best_cosine, share))
    powered = [max(0.0, r) ** weight if weight != 1.0 else max(0.0, r) for r in rels]
    reasons = gate(candidates, opts) if reasons is None else reasons
    eligible = [r in Gate.PASSING for r in reasons]
    best = max((p for p, e in zip(powered, eligible, strict=True) if e), default=0.0)
    for c, rel, p, ok, why in zip(candidates, rels, powered, eligible, reasons, strict=True):
        calibrated = p / best if best > 0 else 0.0
        prior = beta * c.retention if c.active else 0.0
        score = calibrated + prior + (boost if c.timed else 0.0) + told_gain * c.told
        out.append(
            RankedCandidate(
                id=c.id, relevance=rel, calibrated=calibrated, prior=prior, score=score,
                retention=c.retention, eligible=ok, coverage=c.coverage, cosine=c.cosine, margin=c.margin, gate=why,
                timed=c.timed, told=c.told,
            )
        )
    out.sort(key=lambda r: (not r.eligible, -r.score))
    return out


def prompt_cut(ranked: Sequence[RankedCandidate], limit: int) -> list[RankedCandidate]:
    """The head of a ranking that enters the prompt: eligible candidates only, at most ``limit``."""
    return [r for r in ranked if r.eligible][: max(0, limit)]


def held_back(ranked: Sequence[RankedCandidate], limit: int) -> list[RankedCandidate]:
    """What forgetting held back: eligible candidates that relevance alone (``calibrated``,
    stable) would put in the top ``limit`` but the score ranked out — in relevance order."""
    eligible = [r for r in ranked if r.eligible]
    by_relevance = sorted(eligible, key=lambda r: r.calibrated, reverse=True)[: max(0, limit)]
    kept = {r.id for r in eligible[: max(0, limit)]}
    return [r for r in by_relevance if r.id not in kept]


class Verdict:
    """What became of a ranked candidate (:func:`verdicts`): it entered the ``prompt``; ``forgetting``
    held it back (relevance alone would have put it in the prompt, retention ranked it out); the
    relevance ``gate`` held it back (:attr:`RankedCandidate.gate` says why passing ones passed);
    or it passed the gate but ranked below the prompt ``limit``. (Facts that visibility held back
    never reach the ranking: the selectors count them.)"""

    PROMPT = "prompt"
    FORGETTING = "forgetting"
    GATE = "gate"
    LIMIT = "limit"


def verdicts(ranked: Sequence[Any], limit: int) -> dict[Hashable, str]:
    """:class:`Verdict` of every candidate of a ranking (``RankedCandidate`` rows, or anything with
    ``id``, ``eligible``, ``score`` and ``calibrated``), by id."""
    prompt = {r.id for r in prompt_cut(ranked, limit)}
    forgotten = {r.id for r in held_back(ranked, limit)}
    out: dict[Hashable, str] = {}
    for r in ranked:
        if r.id in prompt:
            out[r.id] = Verdict.PROMPT
        elif r.id in forgotten:
            out[r.id] = Verdict.FORGETTING
        elif not r.eligible:
            out[r.id] = Verdict.GATE
        else:
            out[r.id] = Verdict.LIMIT
    return out
