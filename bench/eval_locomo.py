"""LoCoMo retrieval quality: our turn recall next to bm25s, dense-only and plain FTS5, one run.

Import (the real write path, one store for all conversations): per conversation one
``direct`` stream and its two speakers as persons; every turn a message
(``append_message``, ``created_at`` = session date + 1 min per turn index); every
``observation`` item a fact of its speaker (``add_fact``, kind 事件, origin direct, at the
end of its session, heard in its first evidence turn) remembering its evidence dia_ids (a fact merged into an earlier
similar one adds its ids to that fact); every ``session_summary`` an episode of its
session (cues = its sentences); fact vectors from the local USE model in batches of 20
(``store_fact_vector``).

Queries: every question with at least one evidence id, ``now`` = one hour after the last
session of its conversation. Retrieved facts count their evidence ids, retrieved raw
turns their own id, episodes their session.

All-conversation tables use the default retrieval profile (the reference contract).

Held-out tuning (``result["heldout"]``): the conversations are split deterministically —
even positions in the data file are *dev*, odd positions *test* (with one conversation
there is no test half and tuning is skipped). A grid over the whitelisted knobs that only
re-rank (``retention_prior`` × ``query_margin`` × ``dense_spread``, see
:data:`RERANK_GRID`; values outside the whitelist bounds are dropped) is scored on the dev questions only; the
profile with the best mean nDCG@5 of "ours lexical + dense" wins (ties: R@5, then the
smaller distance to the defaults). The test questions then report our recall with the
default and with the tuned profile next to the baselines. The candidate pools do not depend on these two knobs, so
re-ranking each question's recorded pools is exact and no query runs twice: every
candidate keeps what the engine's ``rank`` needs (lexical relevance, IDF coverage, rarest
word, the cosine of ``selectors.fact_cosines``, retention, frozen or not) in the order the
product ranks them, and a profile re-applies ``memory.engine.scoring.rank`` — the function
every product path calls. Each run checks this against the product's own rankings
(``recall.replay_turn_pool`` / ``recall.rank_pool``, default and reference profiles: ``rerank_check``).
The halves are then swapped (tuned on test, reported on dev) so that every conversation is
held out once; ``heldout["cross_validated"]`` pools both folds and gives a paired bootstrap
95 % interval of the R@5 difference to bm25s and to dense-only.
"""
from __future__ import annotations

import itertools
import json
import logging
import re
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.common import KS, dia_ids, mean_rows, require_data, score_question

if TYPE_CHECKING:
    from memory.providers import Embedder

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
TOP = 10  # the pool limit and the deepest cut-off reported
METHODS = {
    "ours_lexical": "ours: lexical turn pool (FTS5 + engine rank, no query vector)",
    "ours_lexical_dense": "ours: lexical + dense (USE), fused re-rank",
    "dense_only": "dense only: USE cosine over the same facts",
    "bm25s_facts": "bm25s over the same facts, same tokens",
    "fts5_raw_turns": "plain FTS5 (unicode61) over raw turns",
}
DIAGNOSTICS = {
    "diag_lexical_no_forgetting": "ours lexical with retention_prior=0 (relevance alone)",
    "diag_lexical_dense_no_forgetting": "ours lexical + dense with retention_prior=0 (relevance alone)",
    "diag_lexical_dense_no_floor": "ours lexical + dense without the relevance gate",
    "diag_lexical_dense_absolute": "ours lexical + dense with pool_share=0 (absolute channel values)",
    "diag_lexical_reference": "ours lexical, built-in reference profile (its blend_score)",
    "diag_lexical_dense_reference": "ours lexical + dense, built-in reference profile (its blend_score)",
}
MINUTE_MS = 60_000
HOUR_MS = 3_600_000
# Held-out tuning: knobs that only re-rank the same candidate pools, and the values tried.
RERANK_GRID = {
    "retention_prior": (0.0, 0.01, 0.02, 0.05, 0.1),
    "query_margin": (-0.4, -0.3, -0.2),
    "dense_spread": (0.2, 0.3, 0.4),
}
HELDOUT_METHODS = {
    "ours_lexical_default": "ours: lexical, default profile",
    "ours_lexical_dense_default": "ours: lexical + dense, default profile",
    "ours_lexical_tuned": "ours: lexical, tuned profile",
    "ours_lexical_dense_tuned": "ours: lexical + dense, tuned profile",
    "dense_only": METHODS["dense_only"],
    "bm25s_facts": METHODS["bm25s_facts"],
    "fts5_raw_turns": METHODS["fts5_raw_turns"],
}


def session_time_ms(text: str) -> int:
    """``'1:56 pm on 8 May, 2023'`` → epoch ms (UTC)."""
    value = datetime.strptime(" ".join(text.split()), "%I:%M %p on %d %B, %Y")
    return int(value.replace(tzinfo=UTC).timestamp() * 1000)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text or "") if s.strip()]


def unicode61_terms(text: str) -> list[str]:
    """What FTS5's default tokenizer would make of ``text`` (lower-cased ``\\w+`` runs)."""
    return re.findall(r"\w+", text.lower())


def fts_match(terms: Sequence[str]) -> str:
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in dict.fromkeys(terms) if t)


@dataclass
class Conversation:
    sample_id: str
    stream_id: int
    person_ids: list[int]
    now: int
    turns: list[tuple[str, str]] = field(default_factory=list)  # (dia_id, text)
    fact_ids: list[int] = field(default_factory=list)
    fact_evidence: dict[int, set[str]] = field(default_factory=dict)
    fact_text: dict[int, str] = field(default_factory=dict)
    fact_vectors: np.ndarray | None = None
    episode_session: dict[int, str] = field(default_factory=dict)
    episode_cues: list[tuple[int, str]] = field(default_factory=list)
    questions: list[dict] = field(default_factory=list)
    observations: int = 0


# What the engine's rank sees of a candidate (id = fact id), in the order the product ranks them.
Candidate = Any  # memory.engine.scoring.RankCandidate


@dataclass
class Replay:
    """One question as evaluated, with what re-ranking it under another profile needs."""

    conversation: str
    category: int
    gold: set[str]
    evidence: dict[int, set[str]]  # fact id → evidence ids (the conversation's)
    lexical: list[Candidate]  # the lexical pool, in its order (no cosine)
    fused: list[Candidate]  # pool ∪ dense candidates, in merge order, with their cosines
    scores: dict[str, dict[str, float]] = field(default_factory=dict)  # method → metrics, default profile

    def score(self, overrides: dict, *, dense: bool) -> dict[str, float]:
        """Metrics of this question with its recorded pool re-ranked under ``overrides``."""
        ids = rerank(self.fused if dense else self.lexical, overrides)
        return score_question([self.evidence[i] for i in ids], self.gold)


def rerank(candidates: Sequence[Candidate], overrides: dict) -> list[int]:
    """The top ``TOP`` ids as the product ranks them: the engine's ``rank``, eligible head."""
    from memory.engine.scoring import prompt_cut, rank

    return [r.id for r in prompt_cut(rank(candidates, overrides), TOP)]


def rank_inputs(facts: Sequence[Any], cosines: dict[int, float] | None = None,
                told: dict[int, float] | None = None) -> list[Candidate]:
    """``ScopedFact`` → the engine's ``RankCandidate`` (with the cosine from ``fact_cosines``, if given;
    where it was told from ``told`` when given, else as the fact's last ranking read it)."""
    from memory.engine.scoring import RankCandidate

    return [
        RankCandidate(
            id=f.id, lexical=f.lexical_relevance, retention=f.retention,
            cosine=None if cosines is None else cosines.get(f.id), coverage=f.coverage, active=f.active,
            rarest=f.rarest, margin=None if cosines is None else getattr(cosines, "margins", {}).get(f.id),
            timed=f.timed, told=(f.told or 0.0) if told is None else told.get(f.id, 0.0),
        )
        for f in facts
    ]


def load(conversations: int | None = None) -> list[dict]:
    data = json.loads(require_data("locomo", "locomo10.json").read_text(encoding="utf-8"))
    return data[:conversations] if conversations else data


def session_times(conv: dict) -> dict[int, int]:
    """Session number → its start (epoch ms, UTC), in session order; empty sessions left out."""
    sessions = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k) and conv[k])
    return {s: session_time_ms(conv[f"session_{s}_date_time"]) for s in sessions}


def session_observations(raw: dict, session: int, speakers: Container[str]) -> Iterator[tuple[str, str, list[str]]]:
    """The observations of one session about the given speakers: (speaker, text, evidence dialog ids)."""
    for speaker, items in (raw["observation"].get(f"session_{session}_observation") or {}).items():
        if speaker not in speakers:
            continue
        for item in items:
            yield speaker, item[0], dia_ids(item[1] if len(item) > 1 else [])


def questions_with_evidence(raw: dict, max_questions: int | None = None) -> list[dict]:
    """The questions that cite at least one dialog id, in file order (capped at ``max_questions``)."""
    questions = [q for q in raw["qa"] if dia_ids(q.get("evidence") or [])]
    return questions[:max_questions] if max_questions else questions


def import_conversation(raw: dict, embedder: Embedder, *, max_questions: int | None = None) -> Conversation:
    from django.db import transaction

    from memory import services

    conv = raw["conversation"]
    sid = raw["sample_id"]
    times = session_times(conv)
    sessions = list(times)
    speakers = [conv["speaker_a"], conv["speaker_b"]]
    with transaction.atomic():
        persons = {
            name: services.resolve_person(platform="locomo", external_id=f"{sid}:{name}", name=name, at=times[sessions[0]])
            for name in speakers
        }
        stream = services.resolve_stream(platform="locomo", kind="direct", external_id=sid, name=f"{sid} {' & '.join(speakers)}")
    last_end = 0
    out = Conversation(sample_id=sid, stream_id=stream.pk, person_ids=[persons[n].pk for n in speakers], now=0)
    for s in sessions:
        turns = conv[f"session_{s}"]
        start = times[s]
        end = start + len(turns) * MINUTE_MS
        last_end = max(last_end, end)
        with transaction.atomic():
            message_ids, heard = [], {}
            for j, turn in enumerate(turns):
                speaker = turn["speaker"]
                if speaker not in persons:  # never happens in locomo10, but stay on the write path
                    persons[speaker] = services.resolve_person(
                        platform="locomo", external_id=f"{sid}:{speaker}", name=speaker, at=start
                    )
                message, _ = services.append_message(
                    stream_id=stream.pk, role="user", content=turn["text"], sender_person_id=persons[speaker].pk,
                    external_message_id=f"{sid}:{turn['dia_id']}:{j}", at=start + j * MINUTE_MS,
                )
                message_ids.append(message.pk)
                heard.setdefault(turn["dia_id"], message.pk)
                out.turns.append((turn["dia_id"], turn["text"]))
            for speaker, text, evidence in session_observations(raw, s, persons):
                out.observations += 1
                write = services.add_fact(
                    person_id=persons[speaker].pk, content=text, kind="事件", origin_kind="direct",
                    source=f"locomo:{sid}", at=end,
                    source_message_id=next((heard[e] for e in evidence if e in heard), None),  # its first evidence turn
                )
                if not write.fact_id:
                    continue
                if write.fact_id not in out.fact_evidence:
                    out.fact_ids.append(write.fact_id)
                    out.fact_text[write.fact_id] = text
                    out.fact_evidence[write.fact_id] = set()
                out.fact_evidence[write.fact_id].update(evidence)
            summary = raw["session_summary"].get(f"session_{s}_summary") or ""
            if summary:
                cues = sentences(summary)
                episode = services.add_episode(
                    stream_id=stream.pk, summary=summary, cues=cues, started_at=start, ended_at=end,
                    message_ids=message_ids, source=f"locomo:{sid}", at=end,
                )
                out.episode_session[episode.pk] = str(s)
                out.episode_cues.extend((episode.pk, c) for c in cues)
    out.now = last_end + HOUR_MS
    # fact vectors through the real service, 20 at a time
    vectors = []
    for start in range(0, len(out.fact_ids), 20):
        chunk = out.fact_ids[start : start + 20]
        embedded = embedder.embed([out.fact_text[f] for f in chunk])
        with transaction.atomic():
            for fid, vec in zip(chunk, embedded, strict=True):
                if vec is None:
                    raise RuntimeError(f"no vector for fact {fid}")
                services.store_fact_vector(fact_id=fid, vector=vec)
                vectors.append(np.asarray(vec, dtype=np.float32))
    out.fact_vectors = np.vstack(vectors) if vectors else np.zeros((0, 512), dtype=np.float32)
    out.questions = questions_with_evidence(raw, max_questions)
    return out


class RawTurnIndex:
    """Plain FTS5 over the raw English turns of one conversation (default unicode61 tokenizer)."""

    def __init__(self, turns: Sequence[tuple[str, str]]):
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE turns USING fts5(text)")
        self.ids = [dia for dia, _ in turns]
        self.db.executemany("INSERT INTO turns(rowid, text) VALUES (?, ?)", [(i + 1, t) for i, (_, t) in enumerate(turns)])

    def search(self, query: str, k: int) -> list[str]:
        match = fts_match(unicode61_terms(query))
        if not match:
            return []
        rows = self.db.execute("SELECT rowid FROM turns WHERE turns MATCH ? ORDER BY bm25(turns) LIMIT ?", (match, k))
        return [self.ids[r - 1] for (r,) in rows]


class Bm25Units:
    """bm25s over a list of texts with our tokens (jieba words + CJK bigrams, FTS5-style split)."""

    def __init__(self, texts: Sequence[str]):
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it sets itself to DEBUG on import
        self.tokens = [fts_tokens(t) for t in texts]
        self.model = bm25s.BM25()
        self.model.index([t or [""] for t in self.tokens], show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        from memory.engine.tokenize import query_terms

        terms = [t for term in query_terms(query) for t in unicode61_terms(term)]
        terms = list(dict.fromkeys(terms))
        if not terms:
            return np.zeros(len(self.tokens), dtype=np.float32)
        return np.asarray(self.model.get_scores(terms), dtype=np.float32)

    def top(self, query: str, k: int) -> list[int]:
        s = self.scores(query)
        order = np.argsort(-s, kind="stable")[:k]
        return [int(i) for i in order if s[i] > 0]


def fts_tokens(text: str) -> list[str]:
    """``index_tokens`` as FTS5's unicode61 would store them."""
    from memory.engine.tokenize import index_tokens

    return unicode61_terms(index_tokens(text))


def dense_top(matrix: np.ndarray, qvec: np.ndarray, k: int) -> list[int]:
    if matrix.shape[0] == 0:
        return []
    sims = matrix @ qvec
    return [int(i) for i in np.argsort(-sims, kind="stable")[:k]]


def _max_per_group(scores: np.ndarray, groups: Sequence[int], k: int, *, positive_only: bool) -> list[int]:
    best: dict[int, float] = {}
    for s, g in zip(scores.tolist(), groups, strict=True):
        if positive_only and s <= 0:
            continue
        if g not in best or s > best[g]:
            best[g] = s
    return [g for g, _ in sorted(best.items(), key=lambda x: -x[1])[:k]]


def evaluate(conversations: Sequence[Conversation], embedder: Embedder, *, log: Callable[[str], None] = print) -> dict:
    from memory import selectors
    from memory.backends import sqlite
    from memory.overrides import active_overrides
    from memory.recall import prompt_facts, rank_pool, replay_turn_pool
    from memory.search import lexical
    from memory.selectors.told import told_for

    base = dict(active_overrides())
    ov = {**base, "fact_recall_limit": TOP}
    ov_no_forgetting = {**ov, "retention_prior": 0.0}
    ov_no_floor = {**ov, "dense_margin": -1.0, "query_margin": -1.0, "dense_spread": 2.0, "lexical_share": 0.0}
    ov_absolute = {**ov, "pool_share": 0.0}
    ov_reference = {**ov, "reference_blend": 1}
    per_method: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    replays: list[Replay] = []
    rerank_check = {"rankings": 0, "mismatches": 0}
    episode_rows: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    ceilings: list[tuple[int, dict[str, float]]] = []
    pool_sizes: list[int] = []
    t_queries = 0.0
    pruning_active = lexical.document_count("facts_fts") >= sqlite.PRUNE_MIN_DOCS
    for conv in conversations:
        raw_index = RawTurnIndex(conv.turns)
        bm_facts = Bm25Units([conv.fact_text[f] for f in conv.fact_ids])
        cue_episodes = [e for e, _ in conv.episode_cues]
        bm_cues = Bm25Units([c for _, c in conv.episode_cues])
        cue_vectors = np.vstack([v for v in embedder.embed([c for _, c in conv.episode_cues])]) if conv.episode_cues else None
        qtexts = [q["question"] for q in conv.questions]
        qvecs = [np.asarray(v, dtype=np.float32) for v in embedder.embed(qtexts)] if qtexts else []
        existing_turns = {d for d, _ in conv.turns}
        all_fact_ids = set().union(*conv.fact_evidence.values()) if conv.fact_evidence else set()
        t0 = time.perf_counter()
        for q, qvec in zip(conv.questions, qvecs, strict=True):
            text = q["question"]
            gold = set(dia_ids(q["evidence"]))
            cat = int(q.get("category", 0))
            ev = conv.fact_evidence

            # the product path: the turn's lexical pool, then the confirm step (rank_pool)
            pool = replay_turn_pool(
                person_ids=conv.person_ids, text=text, impression="", now=conv.now, stream_kind="direct", overrides=ov
            )
            pool_sizes.append(len(pool))
            units: dict[str, list[set[str]]] = {"ours_lexical": [ev[f.id] for f in prompt_facts(pool, TOP)]}
            ranking = rank_pool(
                pool=pool, query_vector=qvec, person_ids=conv.person_ids, text=text, stream_kind="direct",
                now=conv.now, limit=TOP, overrides=ov,
            )
            ranked = ranking.prompt
            units["ours_lexical_dense"] = [ev[f.id] for f in ranked]

            units["dense_only"] = [ev[conv.fact_ids[i]] for i in dense_top(conv.fact_vectors, qvec, TOP)]
            units["bm25s_facts"] = [ev[conv.fact_ids[i]] for i in bm_facts.top(text, TOP)]
            units["fts5_raw_turns"] = [{d} for d in raw_index.search(text, TOP)]

            # What the held-out tuning and the diagnostics re-rank: the same candidates in the order
            # rank_pool ranks them (lexical pool, then the dense channel's extras), each with the
            # cosine of selectors.fact_cosines. The candidate sets do not depend on the re-ranking
            # knobs, so re-ranking them under another profile is exact; rerank_check verifies it.
            def candidates(lexical_pool: Sequence[Any], overrides: dict, conv=conv, qvec=qvec, text=text, cat=cat,
                           gold=gold, ev=ev) -> Replay:  # this question's, bound now
                scope = selectors.dense_scope(
                    person_ids=conv.person_ids, query_vector=qvec, limit=TOP, now=conv.now, stream_kind="direct",
                    overrides=overrides,
                )
                merged = selectors.merge_dense_candidates(lexical_pool, scope.candidates, query=text,
                                                          tokens=scope.tokens, overrides=overrides)
                told = told_for({f.id: f.source_message_id for f in merged if f.source_message_id}, text, overrides)
                return Replay(
                    conv.sample_id, cat, gold, ev, lexical=rank_inputs(lexical_pool),
                    fused=rank_inputs(merged, selectors.fact_cosines([f.id for f in merged], qvec), told),
                )

            # the reference profile's bm25 reads the whole table (the default's the persons' facts): its own candidates
            reference_pool = replay_turn_pool(
                person_ids=conv.person_ids, text=text, impression="", now=conv.now, stream_kind="direct",
                overrides=ov_reference,
            )
            replay, reference_replay = candidates(pool, ov), candidates(reference_pool, ov_reference)
            for name, overrides, dense_side, source in (
                ("diag_lexical_no_forgetting", ov_no_forgetting, False, replay),
                ("diag_lexical_dense_no_forgetting", ov_no_forgetting, True, replay),
                ("diag_lexical_dense_no_floor", ov_no_floor, True, replay),
                ("diag_lexical_dense_absolute", ov_absolute, True, replay),
                ("diag_lexical_reference", ov_reference, False, reference_replay),
                ("diag_lexical_dense_reference", ov_reference, True, reference_replay),
            ):
                units[name] = [ev[i] for i in rerank(source.fused if dense_side else source.lexical, overrides)]
            for dense_side, facts in ((False, prompt_facts(pool, TOP)), (True, ranked)):
                rerank_check["rankings"] += 1
                if rerank(replay.fused if dense_side else replay.lexical, ov) != [f.id for f in facts]:
                    rerank_check["mismatches"] += 1
            # the reference profile through the product path too (its rows must equal the re-rank)
            reference_ranked = rank_pool(
                pool=reference_pool, query_vector=qvec, person_ids=conv.person_ids, text=text, stream_kind="direct",
                now=conv.now, limit=TOP, overrides=ov_reference,
            ).prompt
            for dense_side, facts in ((False, reference_pool[:TOP]), (True, reference_ranked)):
                rerank_check["rankings"] += 1
                if rerank(reference_replay.fused if dense_side else reference_replay.lexical, ov_reference) != [f.id for f in facts]:
                    rerank_check["mismatches"] += 1
            for name, us in units.items():
                replay.scores[name] = score_question(us, gold)
                per_method[name].append((cat, replay.scores[name]))
            replays.append(replay)
            ceilings.append(
                (cat, {"facts": len(gold & all_fact_ids) / len(gold), "raw_turns": len(gold & existing_turns) / len(gold)})
            )

            # episodes at session level
            gold_sessions = {g.split(":")[0][1:] for g in gold}
            eps = selectors.recall_episodes(stream_id=conv.stream_id, query=text, limit=TOP)
            ep_units = {"ours_episodes": [{conv.episode_session[e.id]} for e in eps]}
            if conv.episode_cues:
                ep_units["bm25s_cues"] = [
                    {conv.episode_session[e]}
                    for e in _max_per_group(bm_cues.scores(text), cue_episodes, TOP, positive_only=True)
                ]
                ep_units["dense_cues"] = [
                    {conv.episode_session[e]}
                    for e in _max_per_group(cue_vectors @ qvec, cue_episodes, TOP, positive_only=False)
                ]
            for name, us in ep_units.items():
                episode_rows[name].append((cat, score_question(us, gold_sessions)))
        t_queries += time.perf_counter() - t0
        log(f"  locomo {conv.sample_id}: {len(conv.questions)} questions, {len(conv.fact_ids)} facts, {len(conv.turns)} turns")

    t0 = time.perf_counter()
    held = heldout(replays, [c.sample_id for c in conversations], base)
    held["rerank_check"] = rerank_check
    if rerank_check["mismatches"]:
        log(f"  WARNING: the held-out re-rank differs from the product ranking on {rerank_check['mismatches']} "
            f"of {rerank_check['rankings']} rankings")
    if held.get("chosen"):
        log(f"  locomo held-out: {len(held['grid'])} profiles on {len(held['dev_conversations'])} dev conversations, "
            f"chosen {held['chosen']['params']} in {time.perf_counter() - t0:.1f}s")
    else:
        log(f"  locomo held-out: {held['skipped']}")

    n_questions = len(ceilings)
    return {
        "conversations": [c.sample_id for c in conversations],
        "questions": n_questions,
        "observations": sum(c.observations for c in conversations),
        "facts": sum(len(c.fact_ids) for c in conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "episodes": sum(len(c.episode_session) for c in conversations),
        "pruning_active": pruning_active,
        "mean_lexical_pool": round(float(np.mean(pool_sizes)), 2) if pool_sizes else 0.0,
        "short_lexical_pools": sum(1 for p in pool_sizes if p < TOP),
        "query_seconds": round(t_queries, 2),
        "ks": list(KS),
        "methods": {name: {"label": label, **summarise(per_method[name])} for name, label in METHODS.items()},
        "diagnostics": {name: {"label": label, **summarise(per_method[name])} for name, label in DIAGNOSTICS.items()},
        "ceiling": summarise(ceilings),
        "episodes_session_level": {
            name: {"label": label, **summarise(episode_rows[name])}
            for name, label in (
                ("ours_episodes", "ours: selectors.recall_episodes (FTS5 over cues)"),
                ("bm25s_cues", "bm25s over the same cues (best cue per episode)"),
                ("dense_cues", "dense only: USE over the same cues (best cue per episode)"),
            )
            if episode_rows.get(name)
        },
        "heldout": held,
    }


def summarise(rows: list[tuple[int, dict[str, float]]]) -> dict:
    by_cat = {
        f"{c} {CATEGORIES[c]}": mean_rows([r for cat, r in rows if cat == c])
        for c in CATEGORIES
        if any(cat == c for cat, _ in rows)
    }
    return {"overall": mean_rows([r for _, r in rows]), "by_category": by_cat}


# --- held-out tuning -----------------------------------------------------------------------


def split_conversations(sample_ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Even positions → dev, odd positions → test (deterministic; test is empty for one conversation)."""
    return list(sample_ids[0::2]), list(sample_ids[1::2])


def profile_grid() -> list[dict[str, float]]:
    """Every combination of :data:`RERANK_GRID` within the whitelist bounds, validated like a saved profile."""
    from memory.engine.tuning import WHITELIST, validate_overrides

    axes = {
        name: [v for v in values if WHITELIST[name].min <= v <= WHITELIST[name].max]
        for name, values in RERANK_GRID.items()
    }
    return [validate_overrides(dict(zip(axes, combo, strict=True))) for combo in itertools.product(*axes.values())]


def distance_to_defaults(params: dict[str, float]) -> float:
    """Sum of each knob's distance to its whitelist default, as a share of its allowed range."""
    from memory.engine.tuning import WHITELIST

    return sum(abs(v - WHITELIST[n].legacy) / (WHITELIST[n].max - WHITELIST[n].min) for n, v in params.items())


def tune(dev: Sequence[Replay], base: dict) -> tuple[dict, list[dict]]:
    """The best grid profile on ``dev`` (see the module docstring) and the whole scored grid."""
    grid = []
    for params in profile_grid():
        ov = {**base, "fact_recall_limit": TOP, **params}
        overall = mean_rows([r.score(ov, dense=True) for r in dev])
        grid.append({"params": params, "dev_ndcg5": overall.get("nDCG@5", 0.0), "dev_r5": overall.get("R@5", 0.0)})
    best = max(grid, key=lambda g: (g["dev_ndcg5"], g["dev_r5"], -distance_to_defaults(g["params"])))
    return best, grid


def heldout_rows(test: Sequence[Replay], tuned: dict) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """Every held-out method's per-question metrics on ``test`` (``tuned`` = the full overrides)."""
    rows: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    for r in test:
        rows["ours_lexical_default"].append((r.category, r.scores["ours_lexical"]))
        rows["ours_lexical_dense_default"].append((r.category, r.scores["ours_lexical_dense"]))
        rows["ours_lexical_tuned"].append((r.category, r.score(tuned, dense=False)))
        rows["ours_lexical_dense_tuned"].append((r.category, r.score(tuned, dense=True)))
        for name in ("dense_only", "bm25s_facts", "fts5_raw_turns"):
            rows[name].append((r.category, r.scores[name]))
    return rows


BOOTSTRAP_SAMPLES = 2000


def paired_bootstrap(ours: Sequence[float], other: Sequence[float], *, seed: int = 0) -> dict[str, float]:
    """Mean of ``ours − other`` over the questions and its 95 % interval (paired bootstrap over questions)."""
    diff = np.asarray(ours, dtype=np.float64) - np.asarray(other, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(BOOTSTRAP_SAMPLES, len(diff)))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return {"mean": round(float(diff.mean()), 4), "low": round(float(low), 4), "high": round(float(high), 4)}


def heldout(replays: Sequence[Replay], sample_ids: Sequence[str], base: dict) -> dict:
    """Tune a re-rank profile on the dev conversations, report every method on the test ones;
    then swap the halves (2-fold cross-validation: every conversation held out once)."""
    from memory.engine.tuning import WHITELIST

    dev_ids, test_ids = split_conversations(sample_ids)
    out: dict = {"dev_conversations": dev_ids, "test_conversations": test_ids, "knobs": list(RERANK_GRID)}
    if not test_ids:
        out["skipped"] = "tuning skipped: a held-out split needs at least 2 conversations"
        return out
    dev = [r for r in replays if r.conversation in dev_ids]
    test = [r for r in replays if r.conversation in test_ids]
    defaults = {name: WHITELIST[name].legacy for name in RERANK_GRID}
    best, grid = tune(dev, base)
    default_row = next((g for g in grid if g["params"] == defaults), None)
    rows = heldout_rows(test, {**base, "fact_recall_limit": TOP, **best["params"]})

    # the other fold: tuned on the test half, tested on the dev half
    swapped, _ = tune(test, base)
    cv = heldout_rows(dev, {**base, "fact_recall_limit": TOP, **swapped["params"]})
    for name, items in rows.items():
        cv[name] = items + cv[name]
    ours = [m["R@5"] for _, m in cv["ours_lexical_dense_tuned"]]
    return {
        **out,
        "dev_questions": len(dev),
        "test_questions": len(test),
        "selection": "max mean nDCG@5 of ours lexical + dense on the dev questions; ties: R@5, then closer to defaults",
        "defaults": defaults,
        "default_dev": default_row,
        "grid": grid,
        "chosen": best,
        "methods": {name: {"label": label, **summarise(rows[name])} for name, label in HELDOUT_METHODS.items()},
        "cross_validated": {
            "folds": [
                {"tuned_on": dev_ids, "tested_on": test_ids, "chosen": best["params"]},
                {"tuned_on": test_ids, "tested_on": dev_ids, "chosen": swapped["params"]},
            ],
            "questions": len(ours),
            "methods": {name: {"label": label, **summarise(cv[name])} for name, label in HELDOUT_METHODS.items()},
            "r5_difference": {
                other: paired_bootstrap(ours, [m["R@5"] for _, m in cv[other]])
                for other in ("bm25s_facts", "dense_only")
            },
        },
    }


def run(*, conversations: int | None, max_questions: int | None, embedder: Embedder, log: Callable[[str], None] = print) -> dict:
    raw = load(conversations)
    t0 = time.perf_counter()
    imported = [import_conversation(r, embedder, max_questions=max_questions) for r in raw]
    t_import = time.perf_counter() - t0
    log(f"  locomo import: {len(imported)} conversations in {t_import:.1f}s")
    result = evaluate(imported, embedder, log=log)
    result["import_seconds"] = round(t_import, 2)
    return result
