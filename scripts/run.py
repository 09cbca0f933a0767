"""``make run``: web, worker and beat in one terminal, stopped together by Ctrl-C.

1. Redis: if nothing answers at ``REDIS_URL`` on this machine, a ``redis-server`` is
   started for the session (no persistence) and stopped with the rest.
2. gunicorn (``config/gunicorn.py``), a Celery worker and the beat start in sessions of
   their own, so the terminal's Ctrl-C reaches this process only; their lines are
   shown prefixed with ``web`` / ``worker`` / ``beat`` (one clock: ``config/logs.py``).
3. Once the web answers, the console's address is printed, once.
4. Ctrl-C (or SIGTERM): each process is asked to stop (SIGTERM: gunicorn finishes its
   requests, the worker its tasks), killed after ``STOP_SECONDS``; a second Ctrl-C kills at
   once. Exit status 0 when everything stopped; 1 when a process ended by itself (its
   last lines are above), after the others were stopped.

    .venv/bin/python -m scripts.run [--port 8000] [--beat-schedule .cache/celerybeat-schedule]
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
STOP_SECONDS = 20
READY_SECONDS = 120
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM if this process dies without stopping it (kill -9 of the runner)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    def __init__(self, port: int) -> None:
        self.port = port
        self.children: dict[str, subprocess.Popen] = {}
        self.stopping = False
        self.lock = threading.Lock()
        self.width = 6
        self.pumps: list[threading.Thread] = []

    # --- output ------------------------------------------------------------------

    def say(self, text: str) -> None:
        with self.lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def _pump(self, name: str, stream) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self.say(f"{name:<{self.width}} | {line}")
        stream.close()

    # --- processes ---------------------------------------------------------------

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,
        )
        self.children[name] = proc

    def pump(self) -> None:
        """Show every process's lines (threads start after the last fork: no lock is held in a child)."""
        for name, proc in self.children.items():
            thread = threading.Thread(target=self._pump, args=(name, proc.stdout), daemon=True)
            thread.start()
            self.pumps.append(thread)

    def stop(self, *, force: bool = False) -> None:
        """SIGTERM to every process group still running (SIGKILL with ``force``)."""
        for proc in self.children.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL if force else signal.SIGTERM)

    def wait_all(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        for proc in self.children.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        return all(proc.poll() is not None for proc in self.children.values())

    def exited(self) -> str | None:
        return next((name for name, proc in self.children.items() if proc.poll() is not None), None)

    # --- readiness -----------------------------------------------------------------

    def web_answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # it answers (a 503 names what is down; the page shows it too)
        except OSError:
            return False


def redis_answers(url: str) -> bool:
    import redis  # noqa: PLC0415  (the project's client, only to ask whether a server is there)

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5).ping())
    except (redis.RedisError, OSError):
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--beat-schedule", default=str(ROOT / ".cache" / "celerybeat-schedule"),
                        help="the beat's state file (one per running beat)")
    args = parser.parse_args()

    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    env.setdefault("TZ", env.get("TIME_ZONE", "Asia/Shanghai"))  # one clock for every line (config/logs.py)
    env["PYTHONUNBUFFERED"] = "1"  # lines arrive as they are written, not when a buffer fills
    # A development machine: the worker's warning about running as root says nothing new there.
    env["PYTHONWARNINGS"] = "ignore:You're running the worker with superuser privileges"
    redis_url = env.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    Path(args.beat_schedule).parent.mkdir(parents=True, exist_ok=True)

    sup = Supervisor(args.port)
    parsed = urlparse(redis_url)
    if not redis_answers(redis_url):
        if parsed.hostname not in LOCAL_HOSTS or not shutil.which("redis-server"):
            sup.say(f"Redis does not answer at {redis_url}: start it (or set REDIS_URL), then `make run` again.")
            return 1
        sup.say(f"Starting Redis on port {parsed.port or 6379} for this session (stopped with Ctrl-C).")
        sup.start("redis", ["redis-server", "--port", str(parsed.port or 6379), "--bind", "127.0.0.1",
                            "--save", "", "--appendonly", "no", "--loglevel", "warning"], env)
    sup.start("web", [str(BIN / "gunicorn"), "-c", "config/gunicorn.py", "config.wsgi",
                      "--bind", f"127.0.0.1:{args.port}"], env)
    sup.start("worker", [str(BIN / "celery"), "-A", "config", "--quiet", "worker", "--loglevel=INFO",
                         "--concurrency=2"], env)
    sup.start("beat", [str(BIN / "celery"), "-A", "config", "--quiet", "beat", "--loglevel=INFO",
                       "--schedule", args.beat_schedule], env)
    sup.pump()

    interrupts = 0

    def on_signal(signum, frame) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            sup.stopping = True
            sup.say("\nStopping web, worker and beat … (Ctrl-C again to kill them at once)")
            sup.stop()
        else:
            sup.stop(force=True)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    started = time.monotonic()
    announced = False
    failed = None
    while not sup.stopping:
        failed = sup.exited()
        if failed:
            break
        if not announced and sup.web_answers():
            announced = True
            url = f"http://127.0.0.1:{args.port}/"
            sup.say(f"\n  Memory Console: {url}  (log in as demo / demo-password)\n"
                    f"  API docs: {url}api/docs · Ctrl-C stops web, worker and beat\n")
        elif not announced and time.monotonic() - started > READY_SECONDS:
            sup.say(f"The web server has not answered on port {args.port} after {READY_SECONDS} s; still waiting.")
            started = float("inf")
        time.sleep(0.2)

    if failed and not sup.stopping:
        code = sup.children[failed].returncode
        sup.say(f"\n{failed} ended by itself (exit status {code}); stopping the others.")
        sup.stop()
    if not sup.wait_all(STOP_SECONDS):
        sup.say(f"Still running after {STOP_SECONDS} s: killing them.")
        sup.stop(force=True)
        sup.wait_all(5)
    for thread in sup.pumps:
        thread.join(timeout=2)  # their last lines before the summary
    sup.say("Stopped." if not failed or sup.stopping else "Stopped (see above).")
    return 1 if failed and not sup.stopping else 0


if __name__ == "__main__":
    sys.exit(main())
