"""Tests never touch a deployment's Redis database (issue 11, item 12).

The suite flushes its scratch database before and after use, so that database must come
from one place (``tests/redis_url.py``: ``MEMORY_TEST_REDIS_URL``, default db 15) and
must never be the database the deployment uses (``REDIS_URL``, default db 0). These
tests read the sources, so a new test module that hard-codes a ``redis://`` URL, builds
a client on a literal database or flushes without going through ``tests/redis_url.py``
fails here.
"""
from __future__ import annotations

import ast
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests import redis_url

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
OWNER = TESTS / "redis_url.py"
# A URL whose port no Redis listens on (1 is privileged and unassigned) only ever fails to
# connect: tests of a broker outage use it on purpose, and it cannot flush anything.
UNREACHABLE_PORTS = {1}
# A line may name another URL on purpose (a fake listener on a port of its own, a URL a
# harness must refuse) when it says so with this comment; nothing may connect to it.
NOT_A_TEST_DATABASE = "# not a test database"


def _test_modules() -> list[Path]:
    skip = {OWNER, Path(__file__).resolve()}  # the owner, and this checker's own parser examples
    return sorted(p for p in [*TESTS.rglob("*.py"), ROOT / "conftest.py"] if p.is_file() and p not in skip)


def _hard_coded_urls(source: str) -> list[tuple[int, str]]:
    """(line, URL) of every reachable ``redis://`` URL in the code's strings (docstrings aside)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in docstrings:
            continue
        if NOT_A_TEST_DATABASE in lines[node.lineno - 1]:
            continue
        for word in node.value.split():
            if "redis://" in word or "rediss://" in word:
                url = word[word.index("redis"):].strip("`'\".,;)")
                if urlsplit(url).port not in UNREACHABLE_PORTS:
                    found.append((node.lineno, url))
    return found


def _address(url: str) -> tuple[str, int, int]:
    """(host, port, db) of a ``redis://`` URL, with Redis' defaults filled in."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    host = "127.0.0.1" if host in {"localhost", "::1"} else host
    db_text = parts.path.strip("/") or parse_qs(parts.query).get("db", ["0"])[0]
    return host, parts.port or 6379, int(db_text or 0)


def _env_default(source: Path, name: str) -> str:
    """The literal default of ``env(name, default)`` / ``os.environ.get(name, default)`` in a module."""
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == name
            and isinstance(node.args[1], ast.Constant)
        ):
            return node.args[1].value
    raise AssertionError(f"no literal default for {name} in {source}")


def test_no_test_module_hard_codes_a_redis_url():
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {url}"
        for path in _test_modules()
        for line, url in _hard_coded_urls(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "use tests.redis_url.TEST_REDIS_URL instead of:\n" + "\n".join(offenders)


def test_no_test_module_picks_or_flushes_a_database_of_its_own():
    offenders = []
    for path in _test_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imports_owner = any(
            isinstance(n, ast.ImportFrom) and n.module in {"tests.redis_url", "redis_url"}
            or isinstance(n, ast.ImportFrom) and n.level and n.module == "redis_url"
            for n in ast.walk(tree)
        )
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            literal_db = any(k.arg in {"db", "host", "port"} and isinstance(k.value, ast.Constant) for k in node.keywords)
            if name in {"Redis", "StrictRedis"} and literal_db:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}(...) on a literal address")
            if name in {"select", "execute_command"} and node.args and isinstance(node.args[0], ast.Constant):
                if str(node.args[0].value).upper() in {"SELECT", "FLUSHDB", "FLUSHALL"} or name == "select":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}({node.args[0].value!r})")
            if name in {"flushdb", "flushall"} and not imports_owner:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}() without tests.redis_url")
            if name == "flushall":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: flushall() empties every database")
    assert not offenders, "\n".join(offenders)


def test_the_default_test_database_is_not_the_deployment_default():
    deployment = _env_default(ROOT / "config" / "settings.py", "REDIS_URL")
    test_default = _env_default(OWNER, "MEMORY_TEST_REDIS_URL")
    assert _address(deployment) == ("127.0.0.1", 6379, 0)
    assert _address(test_default)[2] != _address(deployment)[2]
    assert _address(test_default) != _address(deployment)


def test_this_run_does_not_flush_the_configured_deployment_database():
    """With ``REDIS_URL`` and ``MEMORY_TEST_REDIS_URL`` both set, they must still differ."""
    deployment = redis_url.DEPLOYMENT_REDIS_URL or _env_default(ROOT / "config" / "settings.py", "REDIS_URL")
    assert _address(redis_url.TEST_REDIS_URL) != _address(deployment), (
        f"MEMORY_TEST_REDIS_URL={redis_url.TEST_REDIS_URL} is the deployment's REDIS_URL: the tests would flush it"
    )


def test_the_checks_see_what_they_guard_against():
    # the shape the suite had before MEMORY_TEST_REDIS_URL (tests/integration/test_worker.py)
    assert _hard_coded_urls('REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")') == [
        (1, "redis://127.0.0.1:6379/14")
    ]
    assert _hard_coded_urls('client = redis.Redis.from_url(f"redis://localhost:6379/{n}")') != []
    assert _hard_coded_urls('settings.REDIS_URL = "redis://127.0.0.1:1/0"') == []  # unreachable on purpose
    assert _hard_coded_urls('"""Point it at redis://127.0.0.1:6379/9 when 15 is taken."""') == []


def test_the_url_parser_of_these_checks():
    assert _address("redis://127.0.0.1:6379/15") == ("127.0.0.1", 6379, 15)
    assert _address("redis://localhost") == ("127.0.0.1", 6379, 0)
    assert _address("redis://h:6380?db=3") == ("h", 6380, 3)
