"""The prose stays true and short: every environment variable documented, the README a first screen."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

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


SOURCES = ("memory", "console", "curation", "tuning", "config", "bench", "scripts", "tests", "templates")


def _cited_sections() -> dict[str, set[str]]:
    """``{path: {"§N", ...}}`` of every source file citing docs/REFERENCE.md, and the files citing a
    document outside the repository (the design documents the project started from)."""
    cited: dict[str, set[str]] = {}
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".py", ".html", ".md") or ".venv" in path.parts or path == Path(__file__):
                continue
            text = path.read_text(encoding="utf-8")
            outside = re.findall(r"reference-spec|DESIGN\.md", text)
            sections = set(re.findall(r"§\d+(?:\.\d+)?", text))
            if outside or sections:
                cited[str(path.relative_to(ROOT))] = sections | set(outside)
    return cited


def test_the_code_cites_the_reference_in_the_repository():
    headings = set(re.findall(r"^## (§\d+) ", (ROOT / "docs" / "REFERENCE.md").read_text(encoding="utf-8"), re.M))
    assert {"§1", "§6", "§19"} <= headings
    cited = _cited_sections()
    assert "memory/pipeline/__init__.py" in cited  # the scan finds the citations
    wrong = {path: sorted(s - headings) for path, s in cited.items() if s - headings}
    assert not wrong, "cites a section docs/REFERENCE.md does not have, or a document outside the repository"


def test_the_documented_links_exist():
    for doc in ("README.md", "CONTRIBUTING.md", *(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))):
        base = (ROOT / doc).parent
        for target in re.findall(r"\]\(([^)#:]+)\)", (ROOT / doc).read_text(encoding="utf-8")):
            assert (base / target).exists(), f"{doc} links to {target}, which does not exist"


def _sections(text: str) -> list[tuple[str, list[str]]]:
    """``(name, body lines)`` of every marked section of BENCHMARKS.md, in the file's order."""
    found = re.findall(r"<!-- ([a-z0-9-]+):start -->\n(.*?)\n<!-- \1:end -->", text, re.S)
    return [(name, body.splitlines()) for name, body in found]


def test_benchmarks_md_holds_the_current_numbers_only():
    from bench.common import DIARY, SECTIONS

    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert not DIARY.findall(text), "dates, times or commit hashes: history is left to git"
    sections = _sections(text)
    assert len(sections) == text.count(":start -->"), "a start marker without its end"
    budgets = {s.name: s.lines for s in SECTIONS}
    order = [s.name for s in SECTIONS]
    names = [name for name, _ in sections]
    assert set(names) <= set(budgets), "a section without a place in bench/common.py SECTIONS"
    assert names == sorted(names, key=order.index), "sections out of SECTIONS' order"
    assert {"speed", "services", "eval", "eval-api"} <= set(names)
    for name, body in sections:
        assert len(body) <= budgets[name], (name, len(body))


def test_the_sections_budgets_keep_benchmarks_md_within_200_lines():
    from bench.common import SECTIONS

    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    header = text[: text.index("<!-- ")].count("\n")
    assert header + sum(s.lines + 3 for s in SECTIONS) <= 200  # markers and a blank line around each body


def test_the_diary_pattern_finds_dates_times_and_hashes_only():
    from bench.common import DIARY

    for diary in ("run of 2026-12-03", "at 13:49 it", "at 09:03:12", "code 10fbecb", "(a3c8de7:", "commit 0d96efd"):
        assert DIARY.search(diary), diary
    for fine in ("p95 9.426 ms", "1,000 messages", "a loop of 10⁷", "`local:usem3-multilingual-v3`", "R@5 0.529",
                 "1.09×", "2026 facts", "deadbeef", "1234567 rows", "0.6–1.2"):
        assert not DIARY.search(fine), fine


def test_a_section_is_written_at_its_place_within_its_budget(tmp_path):
    from bench.common import SECTIONS, SectionError, replace_section

    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n<!-- eval:start -->\nold\n<!-- eval:end -->\n", encoding="utf-8")
    replace_section(path, "<!-- speed:start -->", "<!-- speed:end -->", "## Speed\n\nfast")
    replace_section(path, "<!-- eval:start -->", "<!-- eval:end -->", "## Quality\n\ngood")
    text = path.read_text(encoding="utf-8")
    assert text.index("## Speed") < text.index("## Quality") and "old" not in text  # speed comes first
    budget = next(s for s in SECTIONS if s.name == "agreement").lines
    for start, body in (("<!-- agreement:start -->", "\n".join(["line"] * (budget + 1))),
                        ("<!-- agreement:start -->", "measured on 2026-12-03"),
                        ("<!-- elsewhere:start -->", "anything")):
        with pytest.raises(SectionError):
            replace_section(path, start, start.replace(":start", ":end"), body)
    assert path.read_text(encoding="utf-8") == text  # a refused section leaves the file as it was
