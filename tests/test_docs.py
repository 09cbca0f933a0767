"""The prose stays true and short: every environment variable documented, the README a first screen."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV_READERS = {"env", "envbool", "envint", "envfloat"}


def _env_names(path: Path) -> set[str]:
    """Names read through settings.py's ``env*()`` helpers or ``os.environ.get`` / ``os.getenv``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        first = node.args[0]
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in ENV_READERS and path.name == "settings.py":
            names.add(first.value)
        elif isinstance(func, ast.Attribute) and (
            (func.attr == "get" and ast.unparse(func.value) == "os.environ") or ast.unparse(func) == "os.getenv"
        ):
            names.add(first.value)
    return names


def read_env_names() -> set[str]:
    paths = [*(ROOT / "config").glob("*.py"), *(ROOT / "memory").rglob("*.py"), *(ROOT / "bench").glob("*.py")]
    names = set().union(*(_env_names(p) for p in paths))
    return names - {"DJANGO_SETTINGS_MODULE", "PYTHONPATH"}  # how a process is started, not a setting


def test_every_environment_variable_the_code_reads_is_documented():
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", (ROOT / "docs" / "CONFIGURATION.md").read_text("utf-8")))
    names = read_env_names()
    assert {"MEMORY_DB", "DATABASE_URL", "GUNICORN_THREADS", "JIEBA_CACHE"} <= names  # the scan finds them
    assert not sorted(names - documented), "read but not in docs/CONFIGURATION.md"


def test_the_scan_sees_each_way_of_reading_the_environment(tmp_path):
    settings = tmp_path / "settings.py"
    settings.write_text('import os\nA = env("A_VAR", "1")\nB = envint("B_VAR", 2)\nC = os.environ.get("C_VAR")\n'
                        'D = os.getenv("D_VAR")\nE = other("NOT_ONE")\n', encoding="utf-8")
    assert _env_names(settings) == {"A_VAR", "B_VAR", "C_VAR", "D_VAR"}


def test_the_readme_is_a_first_screen():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 80
    text = "\n".join(lines)
    assert "make run" in text and "make test" in text and "docs/ARCHITECTURE.md" in text


def test_the_documented_links_exist():
    for doc in ("README.md", "CONTRIBUTING.md", *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))):
        base = (ROOT / doc).parent
        for target in re.findall(r"\]\(([^)#:]+)\)", (ROOT / doc).read_text(encoding="utf-8")):
            assert (base / target).exists(), f"{doc} links to {target}, which does not exist"
