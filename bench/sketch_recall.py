"""How much the knowledge index's sign sketch misses, and what it saves (``python -m bench.sketch_recall``).

Above ``KNOWLEDGE_EXACT_ROWS`` rows the knowledge vector search ranks exactly only the
``KNOWLEDGE_SKETCH_CANDIDATES`` rows whose sign codes are nearest the query's
(:class:`memory.engine.quantize.SignSketch`). This measures its recall against the exact int8
top-15 (what ``search_knowledge`` asks for with its default limit of 5) on real text embedded by
the local model: the corpus is every dialogue sentence and clause of the shared data sets
(LoCoMo, MemDaily, MemoryBank in both languages, DuLeMon), the queries are those sets' questions,
split by a hash of their text into dev (where the candidate count was chosen) and test (reported).
iid Gaussian rows — no structure at all, the worst case for any approximate index, and what the
scale bench store's vectors are — are measured beside it, at the 10× store's 250,000 rows, with
the time of one query each way. The vectors are cached in ``bench/.cache`` (embedding the corpus
takes ~2.5 min on one core).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
from pathlib import Path

import numpy as np

from bench.common import REPO_DIR, RESULTS_DIR, calibration, calibration_text, data_dir, latency_stats, md_table

K = 15
CANDIDATES = (256, 512, 1024, 2048, 4096)
CACHE = REPO_DIR / "bench" / ".cache"
SKIP_KEYS = {"time", "date", "place", "img_url", "blip_caption", "dia_id", "evidence", "answer",
             "choices", "ground_truth", "question", "question_list", "qa"}


def _add(texts: set[str], value: str) -> None:
    s = re.sub(r"^[UB]\d+:\s*", "", value.strip())
    if not 6 <= len(s) <= 300:
        return
    texts.add(s)
    for part in re.split(r"[，。！？；,.!?;]", s):
        part = part.strip()
        if len(part) >= 6 and part != s:
            texts.add(part)


def _walk(value, texts: set[str]) -> None:
    if isinstance(value, str):
        _add(texts, value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in SKIP_KEYS:
                _walk(item, texts)
    elif isinstance(value, list):
        for item in value:
            _walk(item, texts)


def corpus_and_questions() -> tuple[list[str], list[str]]:
    """Every dialogue sentence and clause (the rows), and every question (the queries), sorted."""
    root = data_dir()
    texts: set[str] = set()
    questions: set[str] = set()
    for path in sorted((root / "memdaily").glob("*.json")):
        for item in json.loads(path.read_text()):
            _walk(item.get("message_list", []), texts)
            questions.update(q["question"] for q in item.get("question_list", []))
    for item in json.loads((root / "locomo" / "locomo10.json").read_text()):
        _walk(item["conversation"], texts)
        questions.update(q["question"] for q in item["qa"])
    for lang in ("cn", "en"):
        folder = root / "memorybank-siliconfriend" / "eval_data" / lang
        _walk(json.loads((folder / f"memory_bank_{lang}.json").read_text()), texts)
        for line in (folder / f"probing_questions_{lang}.jsonl").read_text().splitlines():
            if line.strip():
                for asked in json.loads(line).values():
                    questions.update(asked)
    for line in (root / "dulemon-samples" / "samples.json").read_text().splitlines():
        if line.strip():
            _walk(json.loads(line), texts)
    questions = {q.strip() for q in questions if q.strip()}
    return sorted(texts - questions), sorted(questions)


def embedded(texts: list[str], name: str) -> np.ndarray:
    """USE vectors of ``texts`` (float32, unit), cached under a hash of the texts."""
    key = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = CACHE / f"sketch-{name}-{key}.npy"
    if path.exists():
        return np.load(path)
    from memory.providers.local import load_model

    model, _lock = load_model(1)
    out = np.vstack([model.encode(texts[i : i + 256]).astype(np.float32) for i in range(0, len(texts), 256)])
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, out)
    return out


def split_of(text: str) -> str:
    return "dev" if hashlib.sha256(text.encode()).digest()[0] % 2 == 0 else "test"


def matrix_of(vectors: np.ndarray):
    from memory.engine.quantize import Int8Matrix, quantize_vector

    return Int8Matrix.from_blobs([(i, quantize_vector(v)) for i, v in enumerate(vectors)])


def recall(matrix, queries: list[bytes], exact: list[set[int]], candidates: int) -> float:
    sketched = matrix.with_sketch(candidates)
    found = [len({i for i, _ in sketched.top_k(q, K)} & gold) / K for q, gold in zip(queries, exact, strict=True)]
    return round(float(np.mean(found)), 4)


def timings(matrix, queries: list[bytes], candidates: int) -> dict:
    sketched = matrix.with_sketch(candidates)
    out = {}
    for name, m in (("exact", matrix), ("sketch", sketched)):
        samples = []
        for q in queries:
            t = time.perf_counter()
            m.top_k(q, K)
            samples.append((time.perf_counter() - t) * 1000)
        out[name] = latency_stats(samples[5:])
    return out


def main(argv: list[str] | None = None) -> dict:
    from memory.engine.quantize import quantize_vector

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random-rows", type=int, default=250_000, help="iid rows of the worst case (10× store)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "sketch_recall.json")
    args = parser.parse_args(argv)
    cal = {"before": calibration()}
    texts, questions = corpus_and_questions()
    print(f"{len(texts)} sentences and clauses, {len(questions)} questions", flush=True)
    rows, asked = embedded(texts, "rows"), embedded(questions, "questions")
    matrix = matrix_of(rows)
    result: dict = {"rows": len(texts), "k": K, "calibration": cal, "real": {}, "iid": {}}
    for split in ("dev", "test"):
        picked = [quantize_vector(v) for q, v in zip(questions, asked, strict=True) if split_of(q) == split]
        exact = [{i for i, _ in matrix.top_k(q, K)} for q in picked]
        result["real"][split] = {"queries": len(picked), **{str(c): recall(matrix, picked, exact, c) for c in CANDIDATES}}
        print(split, result["real"][split], flush=True)
    rng = np.random.default_rng(20261205)
    iid = matrix_of(rng.standard_normal((args.random_rows, rows.shape[1])).astype(np.float32))
    queries = [quantize_vector(v) for v in rng.standard_normal((200, rows.shape[1])).astype(np.float32)]
    exact = [{i for i, _ in iid.top_k(q, K)} for q in queries]
    result["iid"] = {"rows": args.random_rows, "queries": len(queries),
                     **{str(c): recall(iid, queries, exact, c) for c in CANDIDATES}}
    print("iid", result["iid"], flush=True)
    result["time_ms"] = {"real": timings(matrix, [quantize_vector(v) for v in asked[:205]], 2048),
                         "iid": timings(iid, queries, 2048)}
    result["calibration"]["after"] = calibration()
    args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False))
    print(render(result))
    return result


def render(result: dict) -> str:
    header = ["rows", "queries", *[f"{c} candidates" for c in CANDIDATES]]
    lines = [(f"real, dev ({result['rows']:,})", result["real"]["dev"]), (f"real, test ({result['rows']:,})",
             result["real"]["test"]), (f"iid Gaussian ({result['iid']['rows']:,})", result["iid"])]
    body = [[name, one["queries"], *[f"{one[str(c)]:.4f}" for c in CANDIDATES]] for name, one in lines]
    t = result["time_ms"]
    return "\n".join([
        f"recall@{result['k']} of the sketch against the exact int8 top-{result['k']}:", "",
        md_table(header, body), "",
        "one query, 2048 candidates, ms median / p95: " + "; ".join(
            f"{kind} rows exact {t[kind]['exact']['median_ms']} / {t[kind]['exact']['p95_ms']}, sketch "
            f"{t[kind]['sketch']['median_ms']} / {t[kind]['sketch']['p95_ms']}" for kind in ("real", "iid")),
        calibration_text(result["calibration"]),
    ])


if __name__ == "__main__":
    main()
