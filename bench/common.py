"""Shared helpers of the benchmarks: data location, a throwaway store, metrics, report writing,
the main of the LoCoMo/MemDaily evaluations, and a gunicorn server on a free port.

Nothing here imports Django at module import time: :func:`setup_store` configures
Django (a fresh file-based SQLite database in a temporary directory, migrated) and
must run before any ``memory.*`` module that touches models is imported.
"""
from __future__ import annotations

import argparse
import atexit
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_DIR / "bench" / "results"
BENCHMARKS_MD = REPO_DIR / "BENCHMARKS.md"
KS = (1, 3, 5, 10)
NDCG_KS = (5, 10)
#: The Redis database a benchmark's own processes use: never a deployment's (``REDIS_URL`` defaults to
#: database 0). An in-process evaluation or read-path run lights the short-term activation there.
BENCH_REDIS_URL = os.environ.get("MEMORY_BENCH_REDIS_URL") or "redis://127.0.0.1:6379/13"


class DataMissingError(FileNotFoundError):
    """The shared data folder (or one of its data sets) is not where the evaluation expects it."""



def data_dir() -> Path:
    """``$MEMORY_DATA_DIR`` or ``<repo>/../shared/data`` (the data is never copied into the repo)."""
    override = os.environ.get("MEMORY_DATA_DIR")
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def shown(path: Path | str) -> str:
    """``path`` as results and reports name it: relative to the repository when it lies beside it
    (``bench/.cache/scale.sqlite3``, ``../shared/data``), elsewhere by its last two names only
    (``…/scale-data/scale-3.sqlite3``), so no machine's directories are written down."""
    path = Path(path).resolve()
    if path.is_relative_to(REPO_DIR.parent):
        return os.path.relpath(path, REPO_DIR)
    return str(Path("…", *path.parts[-2:]))


def require_data(*parts: str) -> Path:
    path = data_dir().joinpath(*parts)
    if not path.exists():
        raise DataMissingError(
            f"evaluation data not found: {path} (expected the shared data folder at {data_dir()}; "
            "set MEMORY_DATA_DIR to point elsewhere)"
        )
    return path


def load_memdaily() -> dict[str, list[dict]]:
    """The MemDaily trajectories per type file: ``{file stem: [trajectory, …]}``."""
    folder = require_data("memdaily")
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DataMissingError(f"no MemDaily files in {folder}")
    return {f.stem: json.loads(f.read_text(encoding="utf-8")) for f in files}


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
    os.environ["REDIS_URL"] = BENCH_REDIS_URL
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


@dataclass(frozen=True)
class Section:
    """A part of BENCHMARKS.md that one command writes between its markers, within ``lines`` lines."""

    name: str      # the markers: <!-- name:start --> … <!-- name:end -->
    command: str   # what writes it
    lines: int     # at most this many lines between the markers (heading included)

    @property
    def markers(self) -> tuple[str, str]:
        return f"<!-- {self.name}:start -->", f"<!-- {self.name}:end -->"


#: BENCHMARKS.md's sections in the file's order. The file stays ≤ 200 lines because each section has a
#: budget (tests/test_docs.py adds them up); a new benchmark gets a place here, or shares one.
SECTIONS = (
    Section("speed", "python -m bench.run (make bench)", 32),
    Section("services", "python -m bench.report (make bench)", 19),
    Section("scale", "python -m bench.scale_report (make bench-scale)", 22),
    Section("hosts", "python -m bench.hosts (make bench-hosts)", 4),
    Section("eval", "python -m bench.eval (make eval)", 22),
    Section("eval-api", "python -m bench.eval_api (make eval)", 10),
    Section("eval-matrix", "python -m bench.eval_matrix (make eval)", 20),
    Section("eval-fit", "python -m bench.eval_fit", 11),
    Section("eval-context", "python -m bench.eval_context", 8),
    Section("extraction", "python -m bench.eval_extraction", 5),
    Section("agreement", "python -m bench.agreement", 3),
    Section("live-chat", "python -m bench.live_chat", 3),
)
SECTION_BY_MARKER = {s.markers[0]: s for s in SECTIONS}

#: What BENCHMARKS.md never holds: dates, clock times, commit hashes (history is git's, not the file's).
DIARY = re.compile(
    r"\b(?:19|20)\d\d-\d\d-\d\d\b"                          # a date
    r"|\b\d{1,2}:\d\d(?::\d\d)?\b"                           # a clock time
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"     # a commit hash
)


class SectionError(ValueError):
    """A section that has no place in BENCHMARKS.md, is over its budget, or reads as a diary."""


def check_section(section: Section, body: str) -> None:
    """Raise :class:`SectionError` unless ``body`` fits ``section`` (its budget, no :data:`DIARY` marks)."""
    lines = body.strip("\n").splitlines()
    if len(lines) > section.lines:
        raise SectionError(f"BENCHMARKS.md section {section.name!r} would take {len(lines)} lines, its budget is "
                           f"{section.lines} (bench/common.py SECTIONS): the details belong in bench/results/")
    marks = DIARY.findall(body)
    if marks:
        raise SectionError(f"BENCHMARKS.md section {section.name!r} holds dates, times or commit hashes: "
                           f"{', '.join(sorted(set(marks)))} (history is left to git)")


def replace_section(path: Path, start: str, end: str, body: str, *, title: str = "Benchmarks", intro: str = "") -> None:
    """Write ``body`` between the ``start``/``end`` markers of ``path``, at its place among :data:`SECTIONS`.

    The section must be registered (:data:`SECTIONS`), fit its budget and hold no date, time or commit
    hash (:func:`check_section`; the run's results are written before, so ``--render`` can redo it).
    Everything outside the markers is left untouched; a missing section goes before the first section
    after it in :data:`SECTIONS` that the file has.
    """
    section = SECTION_BY_MARKER.get(start)
    if section is None or section.markers[1] != end:
        raise SectionError(f"{start} is not a section of BENCHMARKS.md: give it a place in bench/common.py SECTIONS")
    check_section(section, body)
    block = f"{start}\n{body.strip(chr(10))}\n{end}"
    text = path.read_text(encoding="utf-8") if path.exists() else f"# {title}\n" + (f"\n{intro.strip()}\n" if intro else "")
    if start in text and end in text and text.index(start) < text.index(end):
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail
    else:
        later = [s.markers[0] for s in SECTIONS[SECTIONS.index(section) + 1:] if s.markers[0] in text]
        if later:
            head, tail = text.split(later[0], 1)
            text = head + block + "\n\n" + later[0] + tail
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def measured(command: str, configuration: str, results: dict) -> str:
    """The line under a section's heading: how its numbers were measured (the command, the configuration,
    how long it took, the machine's calibration around the run: :func:`calibration`)."""
    seconds = results.get("seconds")
    took = f" in {seconds:,.0f} s" if isinstance(seconds, int | float) else ""
    machine = f" ({results['machine']})" if results.get("machine") else ""
    return f"`{command}`{took}; {configuration}; {calibration_text(results.get('calibration'))}{machine}."


def calibration(repeat: int = 3) -> dict:
    """How fast this machine is right now: a pure-Python loop of 10⁷ additions (seconds, the best of
    ``repeat``) and the load average. Taken before and after a run so its figures can be read against
    the machine's speed at the time (a shared machine drifts by a factor of several)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        total = 0
        for i in range(10_000_000):
            total += i
        best = min(best, time.perf_counter() - t)
    return {"loop_1e7_s": round(best, 3), "load_average": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count()}


def calibration_text(cal: dict | None) -> str:
    """``{"before": calibration(), "after": calibration()}`` (or one of them) in words."""
    cal = cal or {}
    parts = [(when, cal[when]) for when in ("before", "after") if cal.get(when)]
    if not parts:
        return "machine calibration not recorded"
    loops = " / ".join(f"{c['loop_1e7_s']} s" for _, c in parts)
    loads = " / ".join(f"{c['load_average'][0]}" for _, c in parts)
    return (f"machine calibration ({' / '.join(w for w, _ in parts)} the run): a Python loop of 10⁷ additions {loops}, "
            f"1-minute load {loads} on {parts[0][1]['cpus']} cores")


def md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def latency_stats(samples: Sequence[float], *, digits: int = 3) -> dict[str, float]:
    """Median, p95 and mean of latencies in ms (``{"n": 0}`` for none)."""
    if not samples:
        return {"n": 0}
    s = sorted(samples)
    return {
        "median_ms": round(statistics.median(s), digits),
        "p95_ms": round(s[min(len(s) - 1, int(0.95 * len(s)))], digits),
        "mean_ms": round(statistics.fmean(s), digits),
        "n": len(s),
    }


# --- the main of an evaluation -------------------------------------------------------------

Log = Callable[[str], None]


def add_evaluation_arguments(p: argparse.ArgumentParser, *, output: Path, keep_db: str) -> None:
    """The arguments :func:`evaluation_main` reads, and ``--keep-db`` (what it keeps: ``keep_db``)."""
    p.add_argument("--skip-locomo", action="store_true")
    p.add_argument("--skip-memdaily", action="store_true")
    p.add_argument("--output", type=Path, default=output, help="results JSON path")
    p.add_argument("--no-markdown", action="store_true", help="do not touch BENCHMARKS.md")
    p.add_argument("--render", type=Path, default=None, metavar="JSON",
                   help="only re-render the BENCHMARKS.md section from an existing results file")
    p.add_argument("--keep-db", action="store_true", help=keep_db)


def evaluation_main(
    args: argparse.Namespace, *, command: str, section: tuple[str, str], title: str = "Benchmarks", intro: str = "",
    render: Callable[[dict], str], measure: Callable[[dict, Log], None],
) -> int:
    """Run an evaluation over LoCoMo and MemDaily (``bench.eval``, ``bench.eval_api``) and report it.

    ``args`` carries ``render``, ``skip_locomo``, ``skip_memdaily``, ``output`` and
    ``no_markdown``. ``--render JSON`` only re-renders the BENCHMARKS.md ``section``;
    otherwise the data sets not skipped must exist (exit 2), ``measure(results, log)``
    fills the results (with the machine's :func:`calibration` before and after), which are
    written to ``--output``, printed as markdown and, unless ``--no-markdown``, put into
    BENCHMARKS.md between the section markers.
    """
    start, end = section
    if args.render is not None:
        text = render(json.loads(args.render.read_text(encoding="utf-8")))
        replace_section(BENCHMARKS_MD, start, end, text, title=title, intro=intro)
        print(f"updated {BENCHMARKS_MD}")
        return 0
    try:
        if not args.skip_locomo:
            require_data("locomo", "locomo10.json")
        if not args.skip_memdaily:
            require_data("memdaily")
    except DataMissingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - t0:6.1f}s] {msg}", flush=True)

    results: dict = {"command": command, "generated_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                     "data_dir": shown(data_dir()), "python": platform.python_version(),
                     "calibration": {"before": calibration()}}
    measure(results, log)
    results["seconds"] = round(time.perf_counter() - t0, 1)
    results["calibration"]["after"] = calibration()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    log(f"wrote {args.output}")
    text = render(results)
    print(text)
    if not args.no_markdown:
        replace_section(BENCHMARKS_MD, start, end, text, title=title, intro=intro)
        log(f"updated {BENCHMARKS_MD}")
    return 0


# --- processes: a gunicorn server, CPU time, stopping ----------------------------------------


def free_port() -> int:
    """A free localhost port: any, or the first free one of ``BENCH_PORTS`` (``18200-18299`` on a shared machine)."""
    low, _, high = os.environ.get("BENCH_PORTS", "").partition("-")
    candidates = range(int(low), int(high or low) + 1) if low else [0]
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise RuntimeError(f"no free port in BENCH_PORTS={os.environ['BENCH_PORTS']}")


def _processes() -> Iterator[tuple[int, list[str]]]:
    """``(pid, the fields of /proc/<pid>/stat after the command's name)`` of every process now running."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            yield int(entry.name), (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its direct children so far (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    return sum((int(f[11]) + int(f[12])) / tick for p, f in _processes() if p == pid or int(f[1]) == pid)


def child_pids(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux /proc), oldest first."""
    return [p for _, p in sorted((int(f[19]), p) for p, f in _processes() if int(f[1]) == pid)]


def rss_mb(pid: int) -> float:
    """Resident memory of one process in MB (``VmRSS``; 0.0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def started_at(pid: int) -> float:
    """When ``pid`` was forked, as a ``time.time()`` value (its start tick in /proc and the boot time)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - uptime + int(fields[19]) / os.sysconf("SC_CLK_TCK")


class ServerCPU:
    """CPU seconds of the PostgreSQL backends serving one database (their titles name it), sampled.

    A backend's CPU is counted up to its last sample, so :meth:`sample` often while they live
    (a connection that closes between samples loses its last interval). SQLite does its work
    inside the client processes, whose CPU the caller measures; this is PostgreSQL's share.
    """

    def __init__(self, database: str):
        self.needle = f" {database} "
        self.seen: dict[int, float] = {}

    def sample(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if not title.startswith("postgres:") or self.needle not in title:
                    continue
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.seen[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick

    @property
    def seconds(self) -> float:
        return sum(self.seen.values())


def stop_process_group(proc: subprocess.Popen, *, timeout: float = 20.0) -> None:
    """SIGTERM the session ``proc`` leads (started with ``start_new_session``), SIGKILL after ``timeout``."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


class Server:
    """``gunicorn -c config/gunicorn.py config.wsgi`` (as `make run` starts it: each worker warms up
    before its first request) on a free localhost port, in a session of its own, with ``env``, from
    the checkout ``cwd`` (this one by default); the access log is written and discarded."""

    def __init__(self, env: dict[str, str], workers: int = 2, cwd: Path = REPO_DIR):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "config.wsgi",
             "--bind", f"127.0.0.1:{self.port}", "--workers", str(workers), "--log-level", "warning"],
            cwd=cwd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.base}/api/openapi.json", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("gunicorn did not become ready")

    def cpu_seconds(self) -> float:
        """User + system CPU time of the master and its workers so far."""
        return tree_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        stop_process_group(self.proc)  # the master and its workers
