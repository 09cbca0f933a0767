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
score · cos(fact, summary)``), is reported beside it. ``w`` and ``g`` are chosen on the dev
conversations (even positions in the data file, as ``bench.eval_locomo`` splits them) by R@5
and reported on the test conversations (odd positions). R@5 = share of a question's evidence
ids held by the first five facts.

    python -m bench.eval_session_prior [--output bench/results/session_prior.json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import calibration, require_data  # noqa: E402

FACT_WEIGHTS = (0.3, 0.4, 0.5)
SESSION_GAINS = (0.0, 0.1, 0.3, 0.5, 0.7, 1.0)


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
            rows.append({
                "split": "dev" if position % 2 == 0 else "test",
                "fact_bm25": bm25(fact_index, len(facts), qt), "fact_cos": fact_vectors @ qvec,
                "session_bm25": bm25(session_index, len(sessions), qt), "session_cos": session_vectors @ qvec,
                "of_session": of_session, "fact_session_cos": fact_session_cos,
                "evidence": evidence, "gold": set(q["evidence"]),
            })
    return rows


def recall_at_5(rows: list[dict], split: str, w: float, g: float, rule: str) -> float:
    values = []
    for r in rows:
        if r["split"] != split:
            continue
        facts = _fused(r["fact_bm25"], r["fact_cos"], w)
        sessions = _fused(r["session_bm25"], r["session_cos"], w)
        if rule == "provenance":
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
    for rule in ("provenance", "content"):
        grid = {(w, g): recall_at_5(rows, "dev", w, g, rule) for w, g in itertools.product(FACT_WEIGHTS, SESSION_GAINS)}
        w, g = max(grid, key=lambda k: (round(grid[k], 6), -k[1]))  # ties: the smaller gain
        facts_only = max(FACT_WEIGHTS, key=lambda x: grid[(x, 0.0)])
        out["rules"][rule] = {
            "chosen_on_dev": {"fact_weight": w, "session_gain": g, "dev_r5": round(grid[(w, g)], 3)},
            "facts_alone_chosen_on_dev": {"fact_weight": facts_only, "dev_r5": round(grid[(facts_only, 0.0)], 3)},
            "test_r5": round(recall_at_5(rows, "test", w, g, rule), 3),
            "test_r5_facts_alone": round(recall_at_5(rows, "test", facts_only, 0.0, rule), 3),
            "dev_grid": {f"w={a} g={b}": round(v, 3) for (a, b), v in grid.items()},
        }
        r = out["rules"][rule]
        print(f"{rule}: chosen on dev w={w} g={g} (dev R@5 {r['chosen_on_dev']['dev_r5']}); test R@5 "
              f"{r['test_r5']} against the facts alone {r['test_r5_facts_alone']}", flush=True)
    out["seconds"] = round(time.perf_counter() - started, 1)
    out["calibration"] = {"before": before, "after": calibration()}
    args.output.write_text(json.dumps(out, ensure_ascii=False, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
