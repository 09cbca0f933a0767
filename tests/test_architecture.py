"""Which way imports may point, checked over the source with ``ast`` (no Django needed).

Every module of the project's packages is parsed, and every import counts —
top-level, function-local and ``TYPE_CHECKING`` ones alike:

* no import cycle between modules (a strongly connected component of more than one);
* the layers: ``memory.engine`` ← ``memory`` ← {``curation``, ``tuning``} ← ``console``,
  with ``config`` (settings, URLs, the Celery app, the API assembly) on top:
  the engine imports nothing of Django or of the project outside itself, ``memory``
  imports no other app, ``curation`` and ``tuning`` import neither each other nor
  ``console``, and no app imports ``config``;
* inside ``memory``, the tiers of :data:`MEMORY_TIERS` (docs/ARCHITECTURE.md draws them): a
  package (``memory.search``) or root module (``memory.models``) imports only from lower tiers,
  never from its own tier's others; the entry points (routes, pages, tasks, commands) may import
  any tier and nothing else in ``memory`` imports them; every module of ``memory`` has a tier;
* a function-local import says why on its own line or the line above (a comment):
  without a reason it belongs at the top of the module.

``KNOWN_*`` lists what is still wrong; the test fails on anything new, and on a
listed entry that is fixed (so the lists only shrink).
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("memory", "curation", "tuning", "console", "config")
#: Layer rank: a module may import only from its own package or a lower rank (engine < memory < apps < console < config).
LAYER = {"memory.engine": 0, "memory": 1, "curation": 2, "tuning": 2, "console": 3, "config": 4}
#: Third-party packages the pure engine must not use.
ENGINE_FORBIDDEN = ("django", "ninja", "celery", "redis", "kombu")

#: Inside ``memory``, bottom first: a unit (a package such as ``memory.search`` or a root module such as
#: ``memory.models``) imports only units of lower tiers.
MEMORY_TIERS: list[set[str]] = [
    {"memory.engine"},
    {"memory.models"},
    {"memory.meta", "memory.broker", "memory.backends", "memory.providers", "memory.checks"},
    {"memory.search", "memory.dispatch", "memory.overrides", "memory.api"},
    {"memory.services"},
    {"memory.privacy"},
    {"memory.selectors"},
    {"memory.recall", "memory.pipeline", "memory.fields", "memory.admin", "memory.apps"},
]
#: Where requests, pages, tasks and commands come in: they may import every tier; nothing else in memory imports them.
MEMORY_ENTRY_POINTS = ("memory.api.routes", "memory.privacy.views", "memory.pipeline.tasks", "memory.management")

KNOWN_CYCLES: set[frozenset[str]] = set()
KNOWN_LAYER_VIOLATIONS: set[tuple[str, str]] = set()
KNOWN_MEMORY_TIER_VIOLATIONS: set[tuple[str, str]] = set()
KNOWN_UNEXPLAINED_LOCAL_IMPORTS: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Import:
    source: str  # importing module
    target: str  # imported name, resolved to the longest known project module when it is one
    line: int
    local: bool  # inside a function
    explained: bool  # a comment on the same line or the line above


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_files() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        base = ROOT / package
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            if "migrations" in path.parts:
                continue
            out[_module_name(path)] = path
    return out


MODULES = _project_files()


def _resolve(name: str) -> str:
    """The project module ``name`` lives in (``memory.models.Fact`` → ``memory.models``), else ``name``."""
    probe = name
    while probe:
        if probe in MODULES:
            return probe
        probe = probe.rpartition(".")[0]
    return name


def _explained(lines: list[str], first: int, last: int) -> bool:
    """A comment on a line of the statements ``first..last`` (1-based) or on the line just above them."""
    if any("#" in lines[n - 1] for n in range(first, last + 1)):
        return True
    above = lines[first - 2].strip() if first >= 2 else ""
    return above.startswith("#")


def _import_runs(tree: ast.AST) -> dict[ast.stmt, tuple[int, int]]:
    """Each import statement → the lines of the run of consecutive imports it belongs to (one comment says why for all)."""
    runs: dict[ast.stmt, tuple[int, int]] = {}
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if not isinstance(body, list):
                continue
            run: list[ast.stmt] = []
            for stmt in [*body, None]:
                if isinstance(stmt, ast.Import | ast.ImportFrom):
                    run.append(stmt)
                    continue
                for member in run:
                    runs[member] = (run[0].lineno, run[-1].end_lineno or run[-1].lineno)
                run = []
    return runs


def _imports(module: str, path: Path) -> Iterator[Import]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text, filename=str(path))
    runs = _import_runs(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, local: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                names = [f"{base}.{alias.name}" for alias in child.names]
            else:
                yield from visit(child, inner)
                continue
            first, last = runs.get(child, (child.lineno, child.lineno))
            for name in names:
                yield Import(module, _resolve(name), child.lineno, local, _explained(lines, first, last))

    yield from visit(tree, False)


ALL_IMPORTS = [imp for module, path in MODULES.items() for imp in _imports(module, path)]


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in ALL_IMPORTS:
        if imp.target in MODULES and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm, iterative; only components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _layer(module: str) -> tuple[str, int] | None:
    for prefix in sorted(LAYER, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix, LAYER[prefix]
    return None


def layer_violations() -> set[tuple[str, str]]:
    out = set()
    for imp in ALL_IMPORTS:
        source = _layer(imp.source)
        if source is None:
            continue
        if source[0] == "memory.engine":
            top = imp.target.split(".")[0]
            if top in ENGINE_FORBIDDEN or (imp.target in MODULES and not imp.target.startswith("memory.engine")):
                out.add((imp.source, imp.target))
            continue
        target = _layer(imp.target) if imp.target in MODULES else None
        if target is None or target[0] == source[0]:
            continue
        if target[1] >= source[1]:  # upwards, or sideways between curation and tuning
            out.add((imp.source, imp.target))
    return out


def _memory_unit(module: str) -> str | None:
    """``memory.search.lexical`` → ``memory.search``; ``memory.models`` → itself; None outside memory."""
    parts = module.split(".")
    if parts[0] != "memory" or len(parts) == 1:
        return None
    return ".".join(parts[:2])


def _is_entry_point(module: str) -> bool:
    return any(module == entry or module.startswith(entry + ".") for entry in MEMORY_ENTRY_POINTS)


def memory_tier_violations() -> set[tuple[str, str]]:
    """(module, imported) pairs inside memory against :data:`MEMORY_TIERS`, and modules without a tier."""
    tier = {unit: rank for rank, units in enumerate(MEMORY_TIERS) for unit in units}
    out = set()
    for module in MODULES:
        unit = _memory_unit(module)
        if unit is not None and unit not in tier and not _is_entry_point(module):
            out.add((module, "<no tier: add its package to MEMORY_TIERS>"))
    for imp in ALL_IMPORTS:
        source, target = _memory_unit(imp.source), _memory_unit(imp.target)
        if source is None or target is None or imp.target not in MODULES:
            continue
        if _is_entry_point(imp.target) and not _is_entry_point(imp.source):
            out.add((imp.source, imp.target))
        elif source != target and not _is_entry_point(imp.source) and tier.get(target, -1) >= tier.get(source, -1):
            out.add((imp.source, imp.target))
    return out


def unexplained_local_imports() -> set[tuple[str, str]]:
    return {(imp.source, imp.target) for imp in ALL_IMPORTS if imp.local and not imp.explained}


def _check(found: set, known: set, what: str) -> None:
    new = sorted(found - known, key=str)
    fixed = sorted(known - found, key=str)
    assert not new, f"new {what}:\n" + "\n".join(map(str, new))
    assert not fixed, f"fixed, remove from the KNOWN list of {what}:\n" + "\n".join(map(str, fixed))


def test_the_project_modules_are_found():
    assert {"memory.engine.scoring", "memory.services", "curation.services", "tuning.services"} <= set(MODULES)


def test_no_import_cycle_between_modules():
    _check(set(strongly_connected(_graph())), KNOWN_CYCLES, "import cycles")


def test_imports_point_down_the_layers():
    _check(layer_violations(), KNOWN_LAYER_VIOLATIONS, "imports against the layers (module, imported)")


def test_memory_imports_point_down_its_tiers():
    _check(memory_tier_violations(), KNOWN_MEMORY_TIER_VIOLATIONS,
           "imports against memory's tiers (module, imported)")


def test_function_local_imports_say_why():
    _check(unexplained_local_imports(), KNOWN_UNEXPLAINED_LOCAL_IMPORTS,
           "function-local imports without a comment (module, imported)")


# --- the checks themselves ----------------------------------------------------------------------


def test_the_cycle_finder_sees_a_cycle_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [frozenset({"a", "b", "c"})]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_a_local_import_is_explained_by_a_comment_on_its_run(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text(
        "import os\n\n\n"
        "def a():\n    import json\n    return json\n\n\n"
        "def b():\n    # the reason\n    import json\n    import csv\n    return json, csv\n\n\n"
        "def c():\n    import json  # the reason\n    return json\n",
        encoding="utf-8",
    )
    found = {(imp.line, imp.target, imp.local, imp.explained) for imp in _imports("sample", path)}
    assert found == {
        (1, "os", False, False),
        (5, "json", True, False),
        (11, "json", True, True),
        (12, "csv", True, True),
        (17, "json", True, True),
    }


@pytest.mark.parametrize(
    ("source", "target", "bad"),
    [
        ("memory.engine.scoring", "django.db", True),
        ("memory.engine.scoring", "memory.models", True),
        ("memory.engine.scoring", "numpy", False),
        ("memory.engine.scoring", "memory.engine.decay", False),
        ("memory.services", "tuning.services", True),
        ("memory.services", "config.celery", True),
        ("curation.services", "tuning.services", True),
        ("tuning.services", "curation.services", True),
        ("curation.services", "memory.services", False),
        ("config.urls", "curation.services", False),
    ],
)
def test_the_layer_rule(monkeypatch, source, target, bad):
    monkeypatch.setattr(
        "tests.test_architecture.ALL_IMPORTS", [Import(source, target, 1, local=False, explained=False)]
    )
    for name in (source, target):
        if name.split(".")[0] in PACKAGES and name not in MODULES:
            monkeypatch.setitem(MODULES, name, ROOT / "x.py")
    assert bool(layer_violations()) is bad


@pytest.mark.parametrize(
    ("source", "target", "bad"),
    [
        ("memory.services", "memory.search.lexical", False),  # down a tier
        ("memory.search.lexical", "memory.services", True),  # up
        ("memory.search.lexical", "memory.dispatch.enqueue", True),  # sideways within a tier
        ("memory.search.lexical", "memory.search.changes", False),  # within a package
        ("memory.recall", "memory.api.routes", True),  # an entry point is imported by nothing in memory
        ("memory.api.routes", "memory.recall", False),  # and imports any tier
        ("memory.pipeline.tasks", "memory.privacy.forget", False),
        ("memory.selectors.facts", "memory.engine.scoring", False),
        ("memory.newpackage.x", "memory.models", True),  # a package without a tier
    ],
)
def test_the_memory_tier_rule(monkeypatch, source, target, bad):
    monkeypatch.setattr(
        "tests.test_architecture.ALL_IMPORTS", [Import(source, target, 1, local=False, explained=False)]
    )
    monkeypatch.setattr("tests.test_architecture.MODULES", {source: ROOT / "x.py", target: ROOT / "y.py"})
    assert bool(memory_tier_violations()) is bad


def test_the_architecture_document_draws_every_memory_package():
    """docs/ARCHITECTURE.md's drawing of memory's tiers names every package and root module the test knows."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    tiers = text[text.index("Inside `memory/`"):text.index("## Where things live")]
    for unit in set().union(*MEMORY_TIERS):
        name = unit.removeprefix("memory.")
        shown = f"{name}.py" if (ROOT / "memory" / f"{name}.py").exists() else f"{name}/"
        assert shown in tiers, f"{shown} is missing from the tiers drawn in docs/ARCHITECTURE.md"
    packages = {p.name for p in (ROOT / "memory").iterdir() if (p / "__init__.py").exists() and p.name != "migrations"}
    for package in packages:
        assert f"  {package}/" in text, f"memory/{package}/ is missing from the house drawn in docs/ARCHITECTURE.md"
