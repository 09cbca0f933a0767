"""Shared helpers of the evaluation: data location, a throwaway store, metrics, report writing.

Nothing here imports Django at module import time: :func:`setup_store` configures
Django (a fresh file-based SQLite database in a temporary directory, migrated) and
must run before any ``memory.*`` module that touches models is imported.
"""
from __future__ import annotations

import atexit
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_DIR / "bench" / "results"
BENCHMARKS_MD = REPO_DIR / "BENCHMARKS.md"
KS = (1, 3, 5, 10)
NDCG_KS = (5, 10)


class DataMissingError(FileNotFoundError):
    """The shared data folder (or one of its data sets) is not where the evaluation expects it."""


def data_dir() -> Path:
    """``$MEMORY_DATA_DIR`` or ``<repo>/../shared/data`` (the data is never copied into the repo)."""
    override = os.environ.get("MEMORY_DATA_DIR")
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def require_data(*parts: str) -> Path:
    path = data_dir().joinpath(*parts)
    if not path.exists():
        raise DataMissingError(
            f"evaluation data not found: {path} (expected the shared data folder at {data_dir()}; "
            "set MEMORY_DATA_DIR to point elsewhere)"
        )
    return path


# --- a throwaway store ---------------------------------------------------------------------

_store_dir: Path | None = None


def setup_store(*, keep: bool = False) -> Path:
    """Configure Django on a fresh migrated SQLite file in a temp dir; return the db path.

    Idempotent within a process. ``keep=True`` leaves the directory behind for inspection.
    """
    global _store_dir
    if _store_dir is not None:
        return _store_dir / "eval.sqlite3"
    from django.conf import settings as dj_settings

    if dj_settings.configured:
        raise RuntimeError("Django is already configured; the evaluation needs its own throwaway store")
    _store_dir = Path(tempfile.mkdtemp(prefix="memory-eval-"))
    if not keep:
        atexit.register(shutil.rmtree, _store_dir, True)
    db = _store_dir / "eval.sqlite3"
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ["MEMORY_DB"] = str(db)
    os.environ.pop("DATABASE_URL", None)  # the evaluation's store is a throwaway SQLite file
    os.environ["MEMORY_ENQUEUE_TASKS"] = "False"
    os.environ["EMBEDDING_PROVIDER"] = "none"  # the evaluation embeds explicitly with the local model
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("JIEBA_CACHE", str(Path(tempfile.gettempdir()) / "memory-console-jieba.cache"))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    return db


# --- gold evidence -------------------------------------------------------------------------

_EVIDENCE_SPLIT = re.compile(r"[;, ]+")
_DIA_ID = re.compile(r"D\d+:\d+")


def dia_ids(evidence: Iterable[str] | str) -> list[str]:
    """LoCoMo evidence strings → dialog ids (split on ``[;, ]``, keep ``D\\d+:\\d+``), order kept, unique."""
    items = [evidence] if isinstance(evidence, str) else list(evidence)
    out: list[str] = []
    for item in items:
        for part in _EVIDENCE_SPLIT.split(str(item)):
            if _DIA_ID.fullmatch(part):
                out.append(part)
    return list(dict.fromkeys(out))


# --- metrics -------------------------------------------------------------------------------


def recall_at(units: Sequence[Iterable[str]], gold: set[str], k: int) -> float:
    """Fraction of ``gold`` covered by the ids of the top-``k`` retrieved units."""
    if not gold:
        return 0.0
    covered: set[str] = set()
    for ids in units[:k]:
        covered.update(ids)
    return len(covered & gold) / len(gold)


def ndcg_at(units: Sequence[Iterable[str]], gold: set[str], k: int) -> float:
    """Binary-gain nDCG@k; ideal DCG = ``min(#gold, k)`` relevant units at the top.

    A unit gains 1 when it covers at least one gold id not covered by a higher-ranked
    unit (a second unit citing the same gold turn adds nothing), so the value stays in
    ``[0, 1]`` even when several units cite the same turn.
    """
    if not gold:
        return 0.0
    seen: set[str] = set()
    dcg = 0.0
    for rank, ids in enumerate(units[:k], start=1):
        new = (set(ids) & gold) - seen
        if new:
            dcg += 1.0 / math.log2(rank + 1)
            seen |= new
    ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(len(gold), k) + 1))
    return dcg / ideal


def score_question(units: Sequence[Iterable[str]], gold: set[str], *, ndcg: bool = True) -> dict[str, float]:
    units = [tuple(u) for u in units]
    out = {f"R@{k}": recall_at(units, gold, k) for k in KS}
    if ndcg:
        out.update({f"nDCG@{k}": ndcg_at(units, gold, k) for k in NDCG_KS})
    return out


def mean_rows(rows: Sequence[dict[str, float]]) -> dict[str, float]:
    if not rows:
        return {"n": 0}
    keys = list(rows[0])
    out: dict[str, float] = {key: round(sum(r[key] for r in rows) / len(rows), 4) for key in keys}
    out["n"] = len(rows)
    return out


# --- report --------------------------------------------------------------------------------


def replace_section(path: Path, start: str, end: str, body: str, *, title: str, intro: str = "") -> None:
    """Write ``body`` between the ``start``/``end`` markers of ``path`` (created with ``title`` if absent).

    Everything outside the markers is left untouched.
    """
    block = f"{start}\n{body.rstrip()}\n{end}"
    if path.exists():
        text = path.read_text(encoding="utf-8")
    else:
        text = f"# {title}\n" + (f"\n{intro.strip()}\n" if intro else "")
    if start in text and end in text and text.index(start) < text.index(end):
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
