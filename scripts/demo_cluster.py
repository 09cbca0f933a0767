"""A Celery worker on "another machine": a network namespace that reaches PostgreSQL and Redis over a veth.

``make demo-cluster`` (root and ``ip`` needed) shows the background work of a
deployment done by a worker host that is not the web host:

1. a throwaway PostgreSQL database is created and migrated (or ``--database-url``);
2. a network namespace gets its own veth pair, ``10.231.N.1/30`` on the host and
   ``10.231.N.2/30`` inside; the namespace has its own loopback, so 127.0.0.1 there
   is not the host's;
3. PostgreSQL and Redis keep listening on the host's 127.0.0.1 only: small TCP
   forwarders (asyncio, in this process) listen on ``10.231.N.1`` and relay to them,
   counting the connections and bytes that come from the namespace;
4. a Celery worker starts inside the namespace with ``DATABASE_URL`` and ``REDIS_URL``
   naming ``10.231.N.1`` (it is the only worker of this demo);
5. gunicorn serves the API on the host; messages are posted through HTTP (the
   on-commit hooks enqueue the stream checks, as deployed);
6. it waits until episodes with cues, facts and vectors written by that worker are in
   the database, and checks that every database and Redis byte of the worker crossed
   the veth (the forwarders' counters; the worker's host name in its ``ping`` answer).

Everything it creates (namespace, veth, forwarders, processes, the throwaway database)
is removed on exit, also after an error or Ctrl-C. Exit status 0 = the worker did the work.

    sudo .venv/bin/python -m scripts.demo_cluster [--messages 60] [--keep-logs DIR]

With a SQLite ``DATABASE_URL`` (``sqlite:///path``) the worker opens the file directly (a
network namespace shares the file system): only Redis crosses the veth then.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
SUBNET = "10.231"
LINES = [
    "我叫小明，在杭州做前端工程师", "我最喜欢的水果是芒果", "周末我一般去西湖边跑步", "我养了一只橘猫叫土豆",
    "我对花生过敏，吃了会起疹子", "下个月我要去成都出差", "我妹妹在上海读大学", "我每天早上都喝一杯美式咖啡",
    "我最近在学吉他，想弹民谣", "我的生日是三月十二号", "我不太喜欢吃香菜", "我打算明年考研",
]


def log(text: str) -> None:
    print(f"[demo-cluster {time.strftime('%H:%M:%S')}] {text}", flush=True)


def run(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, **kw)


class Cleanup:
    """Undo actions run in reverse order, each at most once, whatever fails."""

    def __init__(self) -> None:
        self.actions: list[tuple[str, object]] = []

    def push(self, what: str, action) -> None:
        self.actions.append((what, action))

    def run(self) -> None:
        while self.actions:
            what, action = self.actions.pop()
            try:
                action()
            except Exception as exc:  # keep cleaning up
                log(f"cleanup {what}: {type(exc).__name__}: {exc}")


# --- network ----------------------------------------------------------------------------------


def free_slot() -> int:
    """A third octet N such that 10.231.N.0/30 and the names of slot N are unused on this host."""
    addrs = run("ip", "-o", "addr").stdout
    links = run("ip", "-o", "link").stdout
    spaces = run("ip", "netns", "list").stdout
    start = os.getpid() % 250
    for i in range(250):
        n = (start + i) % 250 + 1
        if f"{SUBNET}.{n}." not in addrs and f"mcd{n}h" not in links and f"mc-demo-{n} " not in spaces + " ":
            return n
    raise RuntimeError("no free 10.231.N.0/30 slot")


class Namespace:
    """``ip netns`` ``mc-demo-N`` with veth ``mcdNh`` (host, .1) ↔ ``mcdNn`` (namespace, .2)."""

    def __init__(self, slot: int, cleanup: Cleanup) -> None:
        self.name = f"mc-demo-{slot}"
        self.host_if, self.ns_if = f"mcd{slot}h", f"mcd{slot}n"
        self.host_ip, self.ns_ip = f"{SUBNET}.{slot}.1", f"{SUBNET}.{slot}.2"
        run("ip", "netns", "add", self.name)
        cleanup.push(f"netns {self.name}", lambda: run("ip", "netns", "del", self.name, check=False))
        run("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        # Deleting the host end removes the pair (also when the namespace is gone first).
        cleanup.push(f"veth {self.host_if}", lambda: run("ip", "link", "del", self.host_if, check=False))
        run("ip", "link", "set", self.ns_if, "netns", self.name)
        run("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        run("ip", "link", "set", self.host_if, "up")
        self.exec("ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        self.exec("ip", "link", "set", self.ns_if, "up")
        self.exec("ip", "link", "set", "lo", "up")

    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def exec(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return run(*self.prefix(), *cmd, check=check)

    def can_connect(self, host: str, port: int) -> bool:
        probe = (
            "import socket,sys\n"
            f"s=socket.socket(); s.settimeout(1.0)\n"
            f"sys.exit(s.connect_ex(({host!r},{port})) != 0)\n"
        )
        return self.exec(sys.executable, "-c", probe, check=False).returncode == 0


class Forwarder:
    """A TCP relay ``listen → target`` in a thread of its own, with per-peer counters."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.listen, self.target = listen, target
        self.connections: dict[str, int] = defaultdict(int)
        self.bytes: dict[str, int] = defaultdict(int)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=f"forward-{listen[1]}", daemon=True)
        self.thread.start()
        self.ready.wait(5)
        if self.error:
            raise self.error

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.server = self.loop.run_until_complete(
                asyncio.start_server(self._client, self.listen[0], self.listen[1], reuse_address=True)
            )
        except BaseException as exc:
            self.error = exc
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")[0]
        self.connections[peer] += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    self.bytes[peer] += len(data)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                with contextlib.suppress(Exception):
                    dst.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    def stop(self) -> None:
        def close() -> None:
            self.server.close()
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.stop()

        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(close)
            self.thread.join(5)


# --- processes ----------------------------------------------------------------------------------


def start(cmd: list[str], env: dict[str, str], log_path: Path, cleanup: Cleanup, what: str) -> subprocess.Popen:
    handle = open(log_path, "ab")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True)
    handle.close()

    def stop() -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    cleanup.push(what, stop)
    return proc


def wait_for(check, timeout: float, interval: float = 0.5, *, what: str = "", alive: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if alive is not None and alive.poll() is not None:
            raise RuntimeError(f"{what}: the process exited ({alive.returncode})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def with_host(url: str, host: str) -> str:
    """``url`` with its host replaced (user, password, port, path kept)."""
    parts = urlsplit(url)
    auth = parts.netloc.rpartition("@")[0]
    netloc = (auth + "@" if auth else "") + host + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


# --- database ----------------------------------------------------------------------------------


def create_database(server_url: str, name: str, cleanup: Cleanup) -> str:
    import psycopg

    admin = urlunsplit(urlsplit(server_url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    cleanup.push(f"database {name}", drop)
    return urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))


def database_counts(env: dict[str, str]) -> dict[str, int]:
    """What the worker wrote, read by a short ``manage.py shell`` on the host."""
    code = (
        "import json\n"
        "from memory.models import Episode, EpisodeCue, Fact, Message\n"
        "print(json.dumps({"
        "'messages': Message.objects.count(),"
        "'summarised': Message.objects.filter(episode__isnull=False).count(),"
        "'episodes': Episode.objects.exclude(kind=Episode.Kind.UNSUMMARIZED).count(),"
        "'cues': EpisodeCue.objects.count(),"
        "'facts': Fact.objects.count(),"
        "'fact_vectors': Fact.objects.filter(embedding__isnull=False).count(),"
        "'message_vectors': Message.objects.filter(embedding__isnull=False).count(),"
        "}))\n"
    )
    done = run(sys.executable, "manage.py", "shell", "-c", code, cwd=ROOT, env=env, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"counting what the worker wrote failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the demo ----------------------------------------------------------------------------------


def can_make_namespaces(command: str) -> bool:
    """Whether this process may make network namespaces (root and iproute2's ``ip``); says why not on stderr."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        print(f"{command} needs root and iproute2's `ip` (network namespaces)", file=sys.stderr)
        return False
    return True


def cleanup_on_signals(prefix: str) -> tuple[Cleanup, Path]:
    """A :class:`Cleanup` holding a fresh temporary directory; SIGTERM and SIGHUP end the process through
    its ``finally`` blocks (so the cleanup runs, as on Ctrl-C)."""

    def interrupted(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    cleanup = Cleanup()
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    cleanup.push("temporary directory", lambda: shutil.rmtree(tmp, ignore_errors=True))
    return cleanup, tmp


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default="", help="an existing, empty database (default: a throwaway one)")
    parser.add_argument("--server", default=os.environ.get("DEMO_PG_SERVER", "postgres://postgres@127.0.0.1:5432/"),
                        help="the PostgreSQL server of the throwaway database")
    parser.add_argument("--db-name", default=os.environ.get("DEMO_CLUSTER_DB", ""),
                        help="name of the throwaway database (default memory_demo_cluster_<pid>)")
    parser.add_argument("--redis-url", default=os.environ.get("DEMO_REDIS_URL", "redis://127.0.0.1:6379/13"),
                        help="a scratch Redis database (flushed before and after)")
    parser.add_argument("--messages", type=int, default=60)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for the worker's results")
    parser.add_argument("--keep-logs", default="", help="copy the worker and gunicorn logs here")
    args = parser.parse_args(argv)

    if not can_make_namespaces("demo-cluster"):
        return 2
    cleanup, tmp = cleanup_on_signals("demo-cluster-")
    try:
        return _demo(args, cleanup, tmp)
    finally:
        if args.keep_logs:
            Path(args.keep_logs).mkdir(parents=True, exist_ok=True)
            for name in ("worker.log", "gunicorn.log"):
                if (tmp / name).exists():
                    shutil.copy(tmp / name, Path(args.keep_logs) / name)
        cleanup.run()
        log("cleaned up: namespace, veth, forwarders, processes" + ("" if args.database_url else ", database"))


def _demo(args, cleanup: Cleanup, tmp: Path) -> int:
    import redis

    # 1. the database
    db_url = args.database_url or create_database(args.server, args.db_name or f"memory_demo_cluster_{os.getpid()}", cleanup)
    sqlite = db_url.startswith("sqlite")
    scratch = redis.Redis.from_url(args.redis_url)
    scratch.flushdb()
    cleanup.push("redis scratch database", scratch.flushdb)
    host_env = {
        **os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONPATH": str(ROOT),
        "DATABASE_URL": db_url, "REDIS_URL": args.redis_url, "MEMORY_ENQUEUE_TASKS": "1",
        "EMBEDDING_PROVIDER": "local", "LLM_BASE_URL": "", "LLM_MODEL": "", "LOG_LEVEL": "INFO",
        "SHORT_TERM_ACTIVATION": "redis",
    }
    # the demo's web server and worker run as deployed (DEBUG off): one throwaway key for both (config/startup.py)
    host_env.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    if sqlite:
        host_env["MEMORY_DB"] = urlsplit(db_url).path
        host_env.pop("DATABASE_URL")
    run(sys.executable, "manage.py", "migrate", "--noinput", "-v", "0", cwd=ROOT, env=host_env, timeout=300)
    log(f"database ready: {with_host(db_url, urlsplit(db_url).hostname or '') if not sqlite else db_url}")

    # 2. the second machine
    ns = Namespace(free_slot(), cleanup)
    log(f"namespace {ns.name}: {ns.ns_if} {ns.ns_ip}/30  ↔  host {ns.host_if} {ns.host_ip}/30")

    # 3. forwarders on the host's veth address
    redis_parts = urlsplit(args.redis_url)
    targets = {"redis": (redis_parts.hostname or "127.0.0.1", redis_parts.port or 6379)}
    if not sqlite:
        pg = urlsplit(db_url)
        targets["postgres"] = (pg.hostname or "127.0.0.1", pg.port or 5432)
    forwarders: dict[str, Forwarder] = {}
    for name, (host, port) in targets.items():
        forwarders[name] = Forwarder((ns.host_ip, port), (host, port))
        cleanup.push(f"forwarder {name}", forwarders[name].stop)
        reach_host = ns.can_connect("127.0.0.1", port)
        reach_veth = ns.can_connect(ns.host_ip, port)
        log(f"{name}: from {ns.name}, 127.0.0.1:{port} {'answers' if reach_host else 'refused'};"
            f" {ns.host_ip}:{port} {'answers' if reach_veth else 'refused'}")
        if reach_host or not reach_veth:
            raise RuntimeError(f"{name} must be reachable from the namespace only over the veth")

    # 4. the worker in the namespace
    worker_env = {**host_env, "REDIS_URL": with_host(args.redis_url, ns.host_ip)}
    if not sqlite:
        worker_env["DATABASE_URL"] = with_host(db_url, ns.host_ip)
    node = f"ns-worker@{ns.name}"
    worker = start(
        [*ns.prefix(), str(Path(sys.executable).with_name("celery")), "-A", "config", "worker", "-n", node,
         "--concurrency=1", "--loglevel=INFO", "--without-mingle", "--without-gossip"],
        worker_env, tmp / "worker.log", cleanup, "worker",
    )
    wait_for(lambda: "ready" in (tmp / "worker.log").read_text("utf-8", "replace"), 120, what="worker start",
             alive=worker)
    log(f"worker {node} ready (DATABASE_URL and REDIS_URL point at {ns.host_ip})")

    # 5. the web host
    port = free_port()
    web = start(
        [str(Path(sys.executable).with_name("gunicorn")), "-c", "config/gunicorn.py", "config.wsgi",
         "--bind", f"127.0.0.1:{port}", "--workers", "2"],
        {**host_env, "WEB_CONCURRENCY": "2"}, tmp / "gunicorn.log", cleanup, "gunicorn",
    )
    token = run(sys.executable, "manage.py", "create_api_token", "demo-cluster", "--scope", "bot", cwd=ROOT,
                env=host_env, timeout=120).stdout.strip().splitlines()[-1]
    import httpx

    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {token}"}

    def web_up() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{base}/api/v1/persons/1/facts", headers=headers, timeout=2).status_code in (200, 404)
        return False

    wait_for(web_up, 120, what="gunicorn start", alive=web)
    log(f"gunicorn on 127.0.0.1:{port} (host side); posting {args.messages} messages")
    stream = {"platform": "demo", "kind": "direct", "external_id": "cluster-1", "name": "cluster-1"}
    sender = {"platform": "demo", "external_id": "10001", "name": "小明"}
    started = time.monotonic()
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        for i in range(args.messages):
            if i % 4 == 3:
                body = {"stream": stream, "role": "assistant", "content": f"好的，记住了（{i}）"}
            else:
                body = {"stream": stream, "sender": sender, "role": "user", "content": LINES[i % len(LINES)]}
            body["external_message_id"] = f"cluster-{i}"
            response = client.post("/api/v1/messages", json=body)
            if response.status_code not in (200, 201):
                raise RuntimeError(f"POST /api/v1/messages: {response.status_code} {response.text[:300]}")
    log(f"posted in {time.monotonic() - started:.1f} s; waiting for the worker's episodes, facts and vectors")

    # 6. results, written by the namespace's worker
    def done() -> dict | None:
        counts = database_counts(host_env)
        ok = counts["episodes"] > 0 and counts["cues"] > 0 and counts["facts"] > 0 and counts["fact_vectors"] > 0
        return counts if ok else None

    counts = wait_for(done, args.timeout, interval=2.0, what="episodes, facts and vectors", alive=worker)
    ping = run(*ns.prefix(), str(Path(sys.executable).with_name("celery")), "-A", "config", "inspect", "ping",
               "-t", "3", env=worker_env, cwd=ROOT, check=False, timeout=60).stdout
    log(f"written by the worker: {json.dumps(counts, ensure_ascii=False)}")
    for name, fwd in forwarders.items():
        log(f"{name} over the veth: {dict(fwd.connections)} connections, {dict(fwd.bytes)} bytes")
    crossed = {name: fwd.bytes.get(ns.ns_ip, 0) for name, fwd in forwarders.items()}
    # `-> name: OK` per answering worker: the namespace's worker is the only one of this deployment.
    answered = sorted(line.split("->", 1)[1].split(":", 1)[0].strip() for line in ping.splitlines() if "->" in line)
    log(f"workers answering ping: {answered}")
    ok = all(crossed.values()) and answered == [node]
    print(json.dumps({"ok": ok, "namespace": ns.name, "worker_address": ns.ns_ip, "host_address": ns.host_ip,
                      "counts": counts, "bytes_over_veth": crossed, "workers": answered}, ensure_ascii=False), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
