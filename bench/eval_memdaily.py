"""MemDaily (Chinese) retrieval quality: inspect and fact recall next to bm25s and dense-only.

Inspect is measured as the product runs it (bm25 over the stream's ``messages_fts``
fused with the stored message vectors), lexical only, and — as a diagnostic — the
reference's LIKE scan it replaced. Message vectors are computed once per message
through ``selectors.message_vectors`` (what the worker backfill stores) and reused by
the dense-only baseline.

Pooling (our choice, see BENCHMARKS.md): a *haystack* is one user — one person, one
``direct`` stream — whose history is one trajectory from each of the 26 type files
(simple … noisy × roles/events/items/places/hybrid), so every question is asked against
its own trajectory plus ~25 trajectories of other types as distractors (≈ 250 messages).
Messages are stored in time order (``append_message``, ``created_at`` from the
trajectory's timestamps). Trajectories are drawn per file with a fixed seed.

Gold is compared by *text*: the data set reuses the same sentences across trajectories
(26,531 messages, 10,797 distinct texts), so a retrieved message whose normalised text
equals a gold message's text counts as that gold message — no retriever could tell the
two apart. Near-duplicates with a different value ("44岁" vs "45岁") stay distractors.

Facts: the offline extractor (``HeuristicExtractor``) is called on each message alone and
its facts are written with ``add_fact``, so each fact knows the message(s) it came from
(``pipeline.extract_stream`` works on 12-message batches and keeps no per-message
provenance). No known facts are offered, so nothing is superseded.
"""
from __future__ import annotations

import random
import re
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np

from bench.common import KS, load_memdaily, mean_rows, recall_at
from bench.eval_locomo import Bm25Units, dense_top

if TYPE_CHECKING:
    from memory.providers import Embedder, Extractor

TOP = 10
SEED = 20240401
DAY_MS = 86_400_000
METHODS = {
    "ours_inspect": "ours: inspect (stream bm25 fused with message-vector cosine, USE)",
    "ours_inspect_lexical": "ours: inspect, lexical only (FTS5 bm25 over the stream)",
    "bm25s_messages": "bm25s over the same messages, same tokens",
    "dense_messages": "dense only: USE cosine over the same messages",
    "ours_facts_lexical": "ours: fact recall, lexical (after offline extraction)",
    "ours_facts_lexical_dense": "ours: fact recall, lexical + dense (USE)",
}
DIAGNOSTICS = {
    "diag_inspect_like": "the reference's inspect: LIKE scan over the first 6 jieba words (diagnostic)",
}
_TIME_RE = re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})日.*?(\d{1,2}):(\d{2})")


def norm(text: str) -> str:
    return re.sub(r"\W", "", text or "")


def time_ms(text: str) -> int:
    m = _TIME_RE.search(text or "")
    if not m:
        return 0
    y, mo, d, h, mi = (int(x) for x in m.groups())
    return int(datetime(y, mo, d, h, mi, tzinfo=UTC).timestamp() * 1000)


def haystacks_from(data: dict[str, list[dict]], count: int | None) -> list[list[tuple[str, dict]]]:
    """Haystack h = the h-th trajectory (seeded shuffle) of every file that has one."""
    rng = random.Random(SEED)
    shuffled = {}
    for name, trajectories in data.items():
        order = list(trajectories)
        rng.shuffle(order)
        shuffled[name] = order
    depth = max(len(v) for v in shuffled.values())
    if count is not None:
        depth = min(depth, count)
    return [[(name, tr[h]) for name, tr in shuffled.items() if h < len(tr)] for h in range(depth)]


@dataclass
class Haystack:
    index: int
    stream_id: int
    person_id: int
    now: int
    messages: list[tuple[int, str]] = field(default_factory=list)  # (message id, text)
    fact_ids: list[int] = field(default_factory=list)
    fact_gold: dict[int, set[str]] = field(default_factory=dict)
    fact_text: dict[int, str] = field(default_factory=dict)
    questions: list[tuple[str, str, set[str]]] = field(default_factory=list)  # (type, question, gold texts)
    covered_by_facts: set[str] = field(default_factory=set)


def timeline(trajectories: Sequence[tuple[str, dict]]) -> list[tuple[int, int, int, str, dict, str]]:
    """A haystack's messages in time order: ``(at ms, trajectory position, mid, file, trajectory, text)``."""
    rows = []
    for order, (name, tr) in enumerate(trajectories):
        for m in tr["message_list"]:
            rows.append((time_ms(m.get("time", "")), order, int(m["mid"]), name, tr, m["message"]))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    return rows


def question_time_ms(trajectories: Sequence[tuple[str, dict]], rows: Sequence[tuple]) -> int:
    """One day after the haystack's last question (or message): when its questions are asked."""
    q_times = [time_ms(q.get("time", "")) for _, tr in trajectories for q in tr["question_list"]]
    return max(q_times + [rows[-1][0]]) + DAY_MS


def gold_questions(trajectories: Sequence[tuple[str, dict]]) -> list[tuple[str, str, set[str]]]:
    """``(file, question, gold texts)`` of every question whose ``target_step_id`` names messages."""
    out = []
    for fname, tr in trajectories:
        by_mid = {int(m["mid"]): m["message"] for m in tr["message_list"]}
        for q in tr["question_list"]:
            gold = {norm(by_mid[int(t)]) for t in q.get("target_step_id") or [] if int(t) in by_mid}
            if gold:
                out.append((fname, q["question"], gold))
    return out


def build(index: int, trajectories: Sequence[tuple[str, dict]], embedder: Embedder, extractor: Extractor) -> Haystack:
    from django.db import transaction

    from memory import services
    from memory.providers import DialogueLine, Participant

    rows = timeline(trajectories)
    ref, name = f"user{index}", "用户"
    with transaction.atomic():
        person = services.resolve_person(platform="memdaily", external_id=ref, name=name, at=rows[0][0])
        stream = services.resolve_stream(platform="memdaily", kind="direct", external_id=f"haystack{index}")
    hs = Haystack(index=index, stream_id=stream.pk, person_id=person.pk, now=question_time_ms(trajectories, rows))
    participants = [Participant(external_id=ref, name=name, person_id=person.pk)]
    with transaction.atomic():
        for at, _order, mid, fname, tr, text in rows:
            message, _ = services.append_message(
                stream_id=stream.pk, role="user", content=text, sender_person_id=person.pk,
                external_message_id=f"{fname}:{tr['tid']}:{mid}", at=at,
            )
            hs.messages.append((message.pk, text))
            extraction = extractor.extract([DialogueLine("user", ref, name, text)], participants, [])
            for fact in extraction.facts if extraction else []:
                write = services.add_fact(
                    person_id=person.pk, content=fact.content, kind=fact.kind, slot=fact.slot, origin_kind="direct",
                    source=f"memdaily:{fname}:{tr['tid']}", at=at,
                )
                if not write.fact_id:
                    continue
                if write.fact_id not in hs.fact_gold:
                    hs.fact_ids.append(write.fact_id)
                    hs.fact_text[write.fact_id] = fact.content
                    hs.fact_gold[write.fact_id] = set()
                hs.fact_gold[write.fact_id].add(norm(text))
                hs.covered_by_facts.add(norm(text))
    from memory import selectors

    selectors.message_vectors([mid for mid, _ in hs.messages], embedder=embedder)  # what the backfill stores
    for start in range(0, len(hs.fact_ids), 20):
        chunk = hs.fact_ids[start : start + 20]
        vectors = embedder.embed([hs.fact_text[f] for f in chunk])
        with transaction.atomic():
            for fid, vec in zip(chunk, vectors, strict=True):
                if vec is not None:
                    services.store_fact_vector(fact_id=fid, vector=vec)
    hs.questions = gold_questions(trajectories)
    return hs


def like_scan(stream_id: int, query: str, limit: int) -> list[int]:
    """The reference's ``search_messages`` (docs/REFERENCE.md §10), kept as a diagnostic baseline:
    the first 6 distinct jieba words, a LIKE prefilter over the 200 newest matching rows, ranked by
    the number of words contained (ties: newer first), top ``limit`` in chronological order."""
    from django.db import connection

    from memory.engine.tokenize import words

    terms = list(dict.fromkeys(words(query)))[:6]
    if not terms or limit < 1:
        return []
    like = " OR ".join(["content LIKE %s ESCAPE '\\'"] * len(terms))
    params = [stream_id, *("%" + t.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                           for t in terms)]
    with connection.cursor() as cur:
        cur.execute(f"SELECT id, content FROM messages WHERE stream_id = %s AND ({like}) ORDER BY id DESC LIMIT 200",
                    params)
        rows = cur.fetchall()
    scored = sorted(((-sum(t in c.lower() for t in terms), -mid) for mid, c in rows if any(t in c.lower() for t in terms)))
    return sorted(-neg for _, neg in scored[:limit])


INSPECTS = ("ours_inspect", "ours_inspect_lexical", "diag_inspect_like")


def inspect_ids(method: str, stream_id: int, question: str, qvec: np.ndarray, k: int) -> list[int]:
    """Message ids one inspect variant returns for ``limit=k``."""
    from memory import selectors
    from memory.recall import inspect_messages

    if method == "diag_inspect_like":
        return like_scan(stream_id, question, k)
    if method == "ours_inspect":  # the action, with the question's vector as the bot would send it
        found = inspect_messages(stream_id=stream_id, query=question, limit=k, query_embedding=qvec)
    else:
        found = selectors.search_messages(stream_id=stream_id, query=question, limit=k)
    return [m.pk for m in found]


def question_type(fname: str) -> str:
    return "_".join(fname.split("_")[:-1])  # '06_noisy_roles' -> '06_noisy'


def evaluate(haystacks: Sequence[Haystack], embedder: Embedder, *, log: Callable[[str], None] = print) -> dict:
    from memory import selectors
    from memory.overrides import active_overrides
    from memory.recall import replay_turn_pool

    ov = {**dict(active_overrides()), "fact_recall_limit": TOP}
    rows: dict[str, list[tuple[str, dict[str, float]]]] = defaultdict(list)
    ceiling: list[tuple[str, dict[str, float]]] = []
    for hs in haystacks:
        texts = [t for _, t in hs.messages]
        msg_norm = [norm(t) for t in texts]
        by_id = dict(zip([i for i, _ in hs.messages], msg_norm, strict=True))
        bm = Bm25Units(texts)
        stored = selectors.message_vectors([i for i, _ in hs.messages], embedder=embedder)
        mvecs = np.vstack([stored[i] for i, _ in hs.messages]).astype(np.float32)
        qvecs = [np.asarray(v, dtype=np.float32) for v in embedder.embed([q for _, q, _ in hs.questions])]
        for (fname, question, gold), qvec in zip(hs.questions, qvecs, strict=True):
            qtype = question_type(fname)
            scores: dict[str, dict[str, float]] = {}
            # inspect returns its top-`limit` set in chronological order: ask once per cut-off
            for name in INSPECTS:
                scores[name] = {
                    f"R@{k}": recall_at([[by_id[m]] for m in inspect_ids(name, hs.stream_id, question, qvec, k)], gold, k)
                    for k in KS
                }
            ranked: dict[str, list[set[str]]] = {
                "bm25s_messages": [{msg_norm[i]} for i in bm.top(question, TOP)],
                "dense_messages": [{msg_norm[i]} for i in dense_top(mvecs, qvec, TOP)],
            }
            pool = replay_turn_pool(
                person_ids=[hs.person_id], text=question, impression="", now=hs.now, stream_kind="direct", overrides=ov
            )
            ranked["ours_facts_lexical"] = [hs.fact_gold[f.id] for f in pool[:TOP]]
            dense = selectors.dense_fact_candidates(
                person_ids=[hs.person_id], query_vector=qvec, limit=TOP, now=hs.now, stream_kind="direct", overrides=ov
            )
            merged = selectors.merge_dense_candidates(pool, dense, query=question)
            ranked["ours_facts_lexical_dense"] = [
                hs.fact_gold[f.id] for f in selectors.rank_recalled_facts(merged, qvec, TOP, ov)
            ]
            for name, units in ranked.items():
                scores[name] = {f"R@{k}": recall_at(units, gold, k) for k in KS}
            for name, s in scores.items():
                rows[name].append((qtype, s))
            ceiling.append((qtype, {"facts": len(gold & hs.covered_by_facts) / len(gold)}))
        log(f"  memdaily haystack {hs.index}: {len(hs.messages)} messages, {len(hs.fact_ids)} facts, "
            f"{len(hs.questions)} questions")

    def summarise(items: list[tuple[str, dict[str, float]]]) -> dict:
        types = sorted({t for t, _ in items})
        return {
            "overall": mean_rows([r for _, r in items]),
            "by_type": {t: mean_rows([r for tt, r in items if tt == t]) for t in types},
        }

    return {
        "haystacks": len(haystacks),
        "messages": sum(len(h.messages) for h in haystacks),
        "questions": len(ceiling),
        "facts": sum(len(h.fact_ids) for h in haystacks),
        "messages_with_a_fact": sum(
            sum(1 for _, t in h.messages if norm(t) in h.covered_by_facts) for h in haystacks
        ),
        "methods": {name: {"label": label, **summarise(rows[name])} for name, label in METHODS.items()},
        "diagnostics": {name: {"label": label, **summarise(rows[name])} for name, label in DIAGNOSTICS.items()},
        "ceiling": summarise(ceiling),
    }


def run(*, haystacks: int | None, embedder: Embedder, log: Callable[[str], None] = print) -> dict:
    from memory.providers.heuristic import HeuristicExtractor

    data = load_memdaily()
    groups = haystacks_from(data, haystacks)
    extractor = HeuristicExtractor()
    t0 = time.perf_counter()
    built = [build(i, g, embedder, extractor) for i, g in enumerate(groups)]
    t_import = time.perf_counter() - t0
    log(f"  memdaily import: {len(built)} haystacks in {t_import:.1f}s")
    t1 = time.perf_counter()
    result = evaluate(built, embedder, log=log)
    result["import_seconds"] = round(t_import, 2)
    result["query_seconds"] = round(time.perf_counter() - t1, 2)
    result["trajectories"] = sum(len(g) for g in groups)
    return result
