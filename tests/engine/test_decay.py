"""Forgetting curve — docs/REFERENCE.md §1."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory.engine import decay
from memory.engine.decay import (
    DEFAULT_FACT_KIND,
    FACT_KINDS,
    FREEZE,
    HALF_LIFE_HOURS,
    MS_PER_HOUR,
    PIN_HALF_LIFE_HOURS,
    REVIVE,
    DecayState,
    clamp_unit,
    decay_curve,
    evaluate,
    freeze_due_at,
    half_life_for,
    is_pinned,
    reinforce,
    relevance_from_bm25,
    retention,
    retention_weight,
    score,
)

H = MS_PER_HOUR
DAY = 24 * H
T0 = 1_800_000_000_000


def test_constants() -> None:
    assert (FREEZE, REVIVE, MS_PER_HOUR) == (0.1, 0.15, 3_600_000)
    assert HALF_LIFE_HOURS == {
        "身份": 8760,
        "日期": 8760,
        "偏好": 2160,
        "关系": 2160,
        "习惯": 1440,
        "事件": 504,
        "状态": 12,
    }
    assert FACT_KINDS == frozenset(HALF_LIFE_HOURS)
    assert DEFAULT_FACT_KIND == "事件" and decay.DEFAULT_HALF_LIFE == 504.0
    assert PIN_HALF_LIFE_HOURS == 876_000.0 and decay.EDGE_HALF_LIFE_HOURS == 720.0
    assert decay.EDGE_BOOST == decay.BOOST == 0.35


def test_retention_halves_per_half_life() -> None:  # 6.1 #1
    assert retention(1.0, T0, 24, T0 + 24 * H) == pytest.approx(0.5, abs=1e-6)
    assert retention(1.0, T0, 24, T0 + 48 * H) == pytest.approx(0.25, abs=1e-6)


def test_retention_future_update_and_clamp() -> None:
    assert retention(1.0, T0 + H, 24, T0) == 1.0
    assert retention(1.7, T0, 24, T0) == 1.0
    assert retention(-0.3, T0, 24, T0 + H) == 0.0


def test_freeze_due_at_24h() -> None:  # 6.1 #2
    due = freeze_due_at(1.0, T0, 24)
    assert due == T0 + 287_014_587
    assert retention(1.0, T0, 24, due) == pytest.approx(0.1, abs=1e-6)
    # truncation: due may be up to 1 ms early, never late
    assert retention(1.0, T0, 24, due) >= 0.1
    assert retention(1.0, T0, 24, due + 1) < 0.1


def test_state_kind_12h() -> None:  # 状态 kept (docs/REFERENCE.md §1)
    h = half_life_for("状态")
    assert h == 12
    assert retention(1.0, T0, h, T0 + 12 * H) == pytest.approx(0.5)
    assert freeze_due_at(1.0, T0, h) == T0 + 143_507_293
    # the 504 h fallback numbers of the reference's latest version
    assert retention(1.0, T0, 504, T0 + 12 * H) == pytest.approx(0.983632, abs=1e-6)
    assert freeze_due_at(1.0, T0, 504) == T0 + 6_027_306_335


@pytest.mark.parametrize(
    ("kind", "delta"),
    [
        ("身份", 104_760_324_400),
        ("日期", 104_760_324_400),
        ("偏好", 25_831_312_865),
        ("关系", 25_831_312_865),
        ("习惯", 17_220_875_243),
        ("事件", 6_027_306_335),
    ],
)
def test_due_at_per_kind(kind: str, delta: int) -> None:  # 6.1 #4
    assert freeze_due_at(1.0, T0, half_life_for(kind)) - T0 == delta


def test_due_at_pin_and_low_strength() -> None:  # 6.1 #4
    assert freeze_due_at(1.0, T0, PIN_HALF_LIFE_HOURS) - T0 == 10_476_032_440_036
    assert freeze_due_at(0.1, T0, 504) == T0
    assert freeze_due_at(0.05, T0, 504) == T0
    assert freeze_due_at(-1.0, T0, 504) == T0


def test_freeze_timing_in_days() -> None:  # docs/REFERENCE.md §1
    days = {k: (freeze_due_at(1.0, 0, half_life_for(k))) / DAY for k in ("身份", "偏好", "习惯", "事件")}
    assert days["身份"] == pytest.approx(1212.50, abs=0.01)
    assert days["偏好"] == pytest.approx(298.97, abs=0.01)
    assert days["习惯"] == pytest.approx(199.32, abs=0.01)
    assert days["事件"] == pytest.approx(69.76, abs=0.01)
    assert freeze_due_at(1.0, 0, 12) / H == pytest.approx(39.863, abs=0.001)
    assert freeze_due_at(0.35, 0, 720) / H == pytest.approx(1301.30, abs=0.01)


def test_reinforce_values() -> None:  # 6.1 #5
    assert reinforce(0) == pytest.approx(0.35)
    assert reinforce(0.5) == pytest.approx(0.675)
    assert reinforce(0.9) == pytest.approx(0.935)
    assert reinforce(1.0) == 1.0
    assert reinforce(0.05) == pytest.approx(0.3825)
    assert reinforce(0.05) - 0.05 > reinforce(0.9) - 0.9


def test_hysteresis() -> None:  # 6.1 #6
    state = dict(strength=0.125, updated_at=T0, half_life_hours=1e9)
    assert evaluate(DecayState(active=True, **state), T0).active is True
    assert evaluate(DecayState(active=False, **state), T0).active is False
    ev = evaluate(DecayState(1.0, T0, 24, True), T0 + 24 * H)
    assert ev.retention == pytest.approx(0.5)
    assert ev.due_at == T0 + 287_014_587
    # boundaries: active needs > FREEZE, revival needs >= REVIVE
    assert evaluate(DecayState(0.1, T0, 24, True), T0).active is False
    assert evaluate(DecayState(0.15, T0, 24, False), T0).active is True


def test_relevance_and_score() -> None:  # 6.1 #7, #8
    assert relevance_from_bm25(-1) == pytest.approx(0.5)
    assert relevance_from_bm25(-2) == pytest.approx(0.6667, abs=1e-4)
    assert relevance_from_bm25(-3) == pytest.approx(0.75)
    assert relevance_from_bm25(-8) == pytest.approx(0.8889, abs=1e-4)
    assert relevance_from_bm25(0) == 0.0
    assert relevance_from_bm25(0.5) == 0.0
    assert score(0.5, 1.0) == 0.0
    assert score(-8, 0.5) > score(-1, 0.5)
    assert score(-2, 0.9) > score(-2, 0.1)
    assert retention_weight(0) == pytest.approx(0.35)
    assert retention_weight(0.5) == pytest.approx(0.675)
    assert retention_weight(1) == pytest.approx(1.0)
    assert score(-2, 0) == pytest.approx(0.23333, abs=1e-5)
    assert score(-2, 1) == pytest.approx(0.66667, abs=1e-5)


def test_half_life_fallbacks() -> None:  # 6.1 #9
    assert half_life_for(None) == half_life_for("") == half_life_for("未分类") == half_life_for("测试") == 504


def test_pin_encoding() -> None:  # docs/REFERENCE.md §1, pinning
    assert is_pinned(PIN_HALF_LIFE_HOURS) and not is_pinned(8760)
    pinned_at = T0 + 1
    later = pinned_at + int(2160 * 5.5 * H)
    ev = evaluate(DecayState(1.0, pinned_at, PIN_HALF_LIFE_HOURS, True), later)
    assert ev.active and ev.due_at > later
    assert ev.retention == pytest.approx(0.990644, abs=1e-6)
    assert reinforce(1.0) == 1.0


def test_sweep_arithmetic() -> None:  # 6.1 #10, #11, #13
    ret_event = retention(1.0, 0, 504, 100 * DAY)
    assert ret_event == pytest.approx(0.036857, abs=1e-6)
    assert evaluate(DecayState(1.0, 0, 504, True), 100 * DAY).active is False
    assert reinforce(ret_event) == pytest.approx(0.373957, abs=1e-6)
    assert retention(1.0, 0, 8760, 100 * DAY) == pytest.approx(0.82704, abs=1e-5)
    assert reinforce(0.02) == pytest.approx(0.363)


def test_decay_curve() -> None:
    curve = decay_curve(1.0, T0, 24, T0, T0 + 48 * H, 3)
    assert [t for t, _ in curve] == [T0, T0 + 24 * H, T0 + 48 * H]
    assert [r for _, r in curve] == pytest.approx([1.0, 0.5, 0.25])
    assert decay_curve(1.0, T0, 24, T0, T0 + H, 1) == [(T0, 1.0)]
    with pytest.raises(ValueError):
        decay_curve(1.0, T0, 24, T0, T0 + H, 0)
    with pytest.raises(ValueError):
        decay_curve(1.0, T0, 24, T0 + H, T0, 5)


def test_clamp_unit() -> None:
    assert (clamp_unit(-1), clamp_unit(0.3), clamp_unit(2)) == (0.0, 0.3, 1.0)


unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(unit, unit)
def test_reinforce_in_unit_and_monotone(a: float, b: float) -> None:  # property (3)
    lo, hi = min(a, b), max(a, b)
    assert 0.0 <= reinforce(lo) <= 1.0
    assert reinforce(lo) >= lo
    assert reinforce(lo) <= reinforce(hi)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6))
def test_reinforce_any_finite_input_stays_in_unit(x: float) -> None:
    assert 0.0 <= reinforce(x) <= 1.0


ENGINE_DIR = Path(decay.__file__).resolve().parent


def test_engine_never_imports_django() -> None:
    """No module of memory/engine imports django (directly or via __import__/importlib strings)."""
    offenders: list[str] = []
    for path in sorted(ENGINE_DIR.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value == "django" or node.value.startswith("django."):
                    names = [node.value]
            offenders.extend(f"{path.name}: {n}" for n in names if n == "django" or n.startswith("django."))
    assert offenders == []
    assert len(list(ENGINE_DIR.glob("*.py"))) >= 12


def test_math_sanity_of_pin_constant() -> None:
    assert int(876000 * math.log2(10) * H) == 10_476_032_440_036


def test_engine_import_loads_no_django() -> None:
    """Importing every engine module in a fresh interpreter must not load django at all."""
    import subprocess
    import sys

    modules = sorted(p.stem for p in ENGINE_DIR.glob("*.py") if p.stem != "__init__")
    code = (
        "import sys\n"
        + "".join(f"import memory.engine.{m}\n" for m in modules)
        + "bad = [m for m in sys.modules if m == 'django' or m.startswith('django.')]\n"
        + "assert not bad, bad\n"
    )
    root = ENGINE_DIR.parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
