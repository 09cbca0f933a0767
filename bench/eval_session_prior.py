"""What the session a fact was told in would add to its ranking (LoCoMo, offline; a diagnostic for issue 30).

Not the product's path: a harness over LoCoMo's own units, to decide whether a new signal is
worth building. Per conversation the facts are its observations (each with its session and
evidence ids) and the sessions are its ``session_summary`` texts. A question scores

* a fact: ``w · bm25 / max bm25 + (1 − w) · (cos + 1) / 2`` (bm25s with PyStemmer's English
  stems and bm25s's English stop words; USE cosines from the product's local embedder), and
* a session: the same fusion over the session summaries,

and ranks facts by ``fact + g · session(fact)`` — provenance: every fact of a session the
question matches is lifted by that session's score (``g = 0``: the facts alone). A second
rule, content instead of provenance (``fact + g · max over the 3 best sessions of session
score · cos(fact, summary)``), is reported beside it. A third, **neighbourhood** — what the
product built (memory/selectors/told.py) — lifts each of the ``POOL`` facts the facts' own score
puts first (the product lifts only its pool) by the share of the question's IDF mass (its terms'
IDF over the conversation's turns) that the turns within ``k`` of its first evidence turn (same
session) hold, ``k`` chosen on dev too. ``w``, ``g`` (and ``k``) are chosen on the dev
conversations (even positions in the data file, as ``bench.eval_locomo`` splits them) by R@5
and reported on the test conversations (odd positions). R@5 = share of a question's evidence
ids held by the first five facts.

    python -m bench.eval_session_prior [--output bench/results/session_prior.json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import calibration, require_data  # noqa: E402

FACT_WEIGHTS = (0.3, 0.4, 0.5)
SESSION_GAINS = (0.0, 0.1, 0.3, 0.5, 0.7, 1.0)
WINDOWS = (0, 1, 2, 4, 8)
POOL = 30


def _fused(bm: np.ndarray, cos: np.ndarray, w: float) -> np.ndarray:
    top = bm.max()
    return w * (bm / top if top > 0 else bm) + (1 - w) * (cos + 1) / 2


def questions(embed) -> list[dict]:
    """Every question with evidence, with what the rules need (scores before fusion)."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")

    def tokens(texts):
        return bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)

    def bm25(index, n, query_tokens):
        ids, scores = index.retrieve(query_tokens, k=n, show_progress=False)
        out = np.zeros(n)
        out[ids[0]] = scores[0]
        return out

    data = json.loads(require_data("locomo", "locomo10.json").read_text(encoding="utf-8"))
    rows = []
    for position, conv in enumerate(data):
        facts = [(int(key.split("_")[1]), text, set(ev if isinstance(ev, list) else [ev]))
                 for key, per in conv["observation"].items() for items in per.values() for text, ev in items]
        dialogue = conv["conversation"]
        turns = [(s, t["dia_id"], t.get("text") or "") for s in sorted(int(k.split("_")[1]) for k in dialogue
                 if k.startswith("session_") and not k.endswith("date_time")) for t in dialogue[f"session_{s}"]]
        turn_of = {dia: i for i, (_s, dia, _t) in enumerate(turns)}
        fact_turn = np.array([min((turn_of[e] for e in ev if e in turn_of), default=-1) for _s, _t, ev in facts])
        turn_session = np.array([s for s, _d, _t in turns])
        turn_terms = [set(t) for t in bm25s.tokenize([t or "-" for _s, _d, t in turns], stopwords="en",
                                                      stemmer=stemmer, show_progress=False, return_ids=False)]
        df = Counter(term for held in turn_terms for term in held)
        summaries = {int(key.split("_")[1]): text for key, text in conv["session_summary"].items()}
        sessions = sorted(summaries)
        fact_index, session_index = bm25s.BM25(), bm25s.BM25()
        fact_index.index(tokens([t for _s, t, _e in facts]), show_progress=False)
        session_index.index(tokens([summaries[s] for s in sessions]), show_progress=False)
        fact_vectors = embed([t for _s, t, _e in facts])
        session_vectors = embed([summaries[s] for s in sessions])
        of_session = np.array([sessions.index(s) if s in summaries else -1 for s, _t, _e in facts])
        fact_session_cos = fact_vectors @ session_vectors.T  # the conversation's, shared by its questions
        evidence = [e for _s, _t, e in facts]
        asked = [q for q in conv["qa"] if q.get("evidence")]
        for q, qvec in zip(asked, embed([q["question"] for q in asked]), strict=True):
            qt = tokens([q["question"]])
            qterms = set(bm25s.tokenize([q["question"]], stopwords="en", stemmer=stemmer, show_progress=False,
                                        return_ids=False)[0])
            q_idf = {w: math.log(1 + (len(turns) - df[w] + 0.5) / (df[w] + 0.5)) for w in qterms if df[w]}
            rows.append({
                "split": "dev" if position % 2 == 0 else "test",
                "fact_bm25": bm25(fact_index, len(facts), qt), "fact_cos": fact_vectors @ qvec,
                "session_bm25": bm25(session_index, len(sessions), qt), "session_cos": session_vectors @ qvec,
                "of_session": of_session, "fact_session_cos": fact_session_cos,
                "turn_terms": turn_terms, "q_idf": q_idf, "fact_turn": fact_turn, "turn_session": turn_session,
                "evidence": evidence, "gold": set(q["evidence"]),
            })
    return rows


def neighbourhood(r: dict, facts: np.ndarray, k: int) -> np.ndarray:
    """Each of the ``POOL`` best facts' share of the question's IDF mass that the turns within ``k``
    turns of its first evidence turn (same session) hold; 0 for the rest."""
    out = np.zeros(len(facts))
    total = sum(r["q_idf"].values())
    if total <= 0:
        return out
    held_by, sessions = r["turn_terms"], r["turn_session"]
    for i in np.argsort(-facts, kind="stable")[:POOL]:
        t = r["fact_turn"][i]
        if t < 0:
            continue
        near = set().union(*(held_by[j] for j in range(max(0, t - k), min(len(held_by), t + k + 1))
                             if sessions[j] == sessions[t]))
        out[i] = sum(v for w, v in r["q_idf"].items() if w in near) / total
    return out


def recall_at_5(rows: list[dict], split: str, w: float, g: float, rule: str, window: int = 2) -> float:
    values = []
    for r in rows:
        if r["split"] != split:
            continue
        facts = _fused(r["fact_bm25"], r["fact_cos"], w)
        sessions = _fused(r["session_bm25"], r["session_cos"], w)
        if rule == "neighbourhood":
            prior = neighbourhood(r, facts, window) if g else 0.0
        elif rule == "provenance":
            prior = np.where(r["of_session"] >= 0, sessions[r["of_session"]], sessions.min())
        else:  # content: how close the fact is to the best sessions
            best = np.argsort(-sessions)[:3]
            prior = (r["fact_session_cos"][:, best] * sessions[best]).max(axis=1)
        order = np.argsort(-(facts + g * prior), kind="stable")[:5]
        got = set().union(*(r["evidence"][i] for i in order))
        values.append(len(got & r["gold"]) / len(r["gold"]))
    return float(np.mean(values))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "session_prior.json")
    args = parser.parse_args(argv)
    from memory.providers.local import LocalUSEEmbedder

    embedder = LocalUSEEmbedder()

    def embed(texts):
        return np.vstack([v for i in range(0, len(texts), 64) for v in embedder.embed(texts[i:i + 64])])

    started, before = time.perf_counter(), calibration()
    rows = questions(embed)
    out: dict = {"command": "python -m bench.eval_session_prior", "questions": len(rows), "rules": {}}
    for rule in ("provenance", "content", "neighbourhood"):
        windows = WINDOWS if rule == "neighbourhood" else (0,)
        grid = {(w, g, k): recall_at_5(rows, "dev", w, g, rule, k)
                for w, g, k in itertools.product(FACT_WEIGHTS, SESSION_GAINS, windows) if g or k == windows[0]}
        w, g, k = max(grid, key=lambda c: (round(grid[c], 6), -c[1], -c[2]))  # ties: the smaller gain, window
        facts_only = max(FACT_WEIGHTS, key=lambda x: grid[(x, 0.0, windows[0])])
        out["rules"][rule] = {
            "chosen_on_dev": {"fact_weight": w, "session_gain": g, **({"window": k} if rule == "neighbourhood" else {}),
                              "dev_r5": round(grid[(w, g, k)], 3)},
            "facts_alone_chosen_on_dev": {"fact_weight": facts_only, "dev_r5": round(grid[(facts_only, 0.0, windows[0])], 3)},
            "test_r5": round(recall_at_5(rows, "test", w, g, rule, k), 3),
            "test_r5_facts_alone": round(recall_at_5(rows, "test", facts_only, 0.0, rule), 3),
            "dev_grid": {f"w={a} g={b}" + (f" k={c}" if rule == "neighbourhood" else ""): round(v, 3)
                         for (a, b, c), v in grid.items()},
        }
        r = out["rules"][rule]
        print(f"{rule}: chosen on dev w={w} g={g}{f' k={k}' if rule == 'neighbourhood' else ''} (dev R@5 "
              f"{r['chosen_on_dev']['dev_r5']}); test R@5 {r['test_r5']} against the facts alone "
              f"{r['test_r5_facts_alone']}", flush=True)
    out["seconds"] = round(time.perf_counter() - started, 1)
    out["calibration"] = {"before": before, "after": calibration()}
    args.output.write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
