"""Profiles and live overrides (docs/REFERENCE.md §12)."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memory import overrides
from memory.engine.scoring import apply_pool_percentile
from memory.models import Meta, PipelineEvent
from tests import dbenv
from tuning import services
from tuning.models import RetrievalProfile
from tuning.services import ProfileError

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def names() -> list[str]:
    return [p.name for p in services.list_profiles()]


# --- 82: validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "param", "fragment"),
    [
        ({"freeze_threshold": 0.2}, "freeze_threshold", "不在调优白名单"),
        ({"bm25_weight": 99.0}, "bm25_weight", "越界"),
        ({"ppr_hops": 1.5}, "ppr_hops", "需要整数"),
        ({"ppr_hops": 3.5}, "ppr_hops", "需要整数"),  # 3.0 is the integer 3 (test_api: whole numbers)
        ({"ppr_alpha": True}, "ppr_alpha", "需要数值"),
        ({"ppr_alpha": "0.9"}, "ppr_alpha", "需要数值"),
        ({"fact_recall_limit": 0}, "fact_recall_limit", "越界"),
    ],
)
def test_invalid_params_are_refused_naming_the_parameter(params, param, fragment):
    with pytest.raises(ProfileError) as err:
        services.save_profile("x", params)
    assert fragment in str(err.value)
    assert err.value.param == param
    assert not RetrievalProfile.objects.exists()


def test_valid_params_pass_unchanged_and_ints_stay_ints():
    row = services.save_profile("x", {"bm25_weight": 2.0, "ppr_hops": 3, "pool_score_percentile": 0})
    assert row.params == {"bm25_weight": 2.0, "ppr_hops": 3, "pool_score_percentile": 0.0}
    stored = RetrievalProfile.objects.get(name="x").params
    assert isinstance(stored["ppr_hops"], int) and not isinstance(stored["ppr_hops"], bool)
    assert isinstance(stored["pool_score_percentile"], float)


def test_params_must_be_an_object():
    with pytest.raises(ProfileError):
        services.save_profile("x", [1, 2])


# --- 85: pool percentile (engine helper used by the replay) -------------------------------


def test_pool_percentile():
    assert apply_pool_percentile([0.9, 0.5, 0.1], 0) == 3
    assert apply_pool_percentile([0.9, 0.5, 0.1], 0.5) == 2
    assert apply_pool_percentile([0.9, 0.5, 0.1], 0.9) == 1
    assert apply_pool_percentile([float(i) for i in range(10, 0, -1)], 0.25) == 8


# --- 86: lifecycle ------------------------------------------------------------------------


def test_profile_lifecycle():
    # "reference" is built in next to "default" (issue 16: the reference ranking stays comparable)
    assert names() == ["default", "reference"]
    services.save_profile("boost", {"bm25_weight": 2.0}, at=1000)
    assert names() == ["default", "reference", "boost"]
    default, _reference, boost = services.list_profiles()
    assert default.builtin and default.active and default.params == {} and default.created_at is None
    assert not boost.active and boost.created_at == 1000 and boost.last_applied_at is None

    applied = services.apply_profile("boost", at=2000)
    assert applied["profile"] == "boost" and applied["params"] == {"bm25_weight": 2.0}
    assert services.active_profile_name() == "boost"
    assert overrides.active_overrides() == {"bm25_weight": 2.0}
    assert overrides.tuned("bm25_weight", 1.0) == 2.0
    assert overrides.tuned("ppr_alpha", 0.85) == 0.85
    assert RetrievalProfile.objects.get(name="boost").last_applied_at == 2000
    event = PipelineEvent.objects.filter(kind="retrieval_profile_applied").latest("seq")
    assert event.payload == {"profile": "boost", "params": 1}

    exported = services.export_profile("boost")
    assert exported["profile"] == "boost" and exported["params"] == {"bm25_weight": 2.0}
    assert exported["exported_at"].endswith("Z")

    services.rollback_to_default()
    assert services.active_profile_name() == "default"
    assert overrides.active_overrides() == {}

    assert services.delete_profile("boost") is True
    assert names() == ["default", "reference"]
    assert services.delete_profile("ghost") is False  # unknown names are silent


def test_save_keeps_created_at_and_last_applied_at():
    services.save_profile("p", {"bm25_weight": 2.0}, at=1000)
    services.apply_profile("p", at=1500)
    services.save_profile("p", {"bm25_weight": 3.0}, at=2000)
    row = RetrievalProfile.objects.get(name="p")
    assert (row.created_at, row.last_applied_at, row.params) == (1000, 1500, {"bm25_weight": 3.0})
    # saving the active profile does not change the live overrides until re-applied
    assert overrides.active_overrides() == {"bm25_weight": 2.0}
    services.apply_profile("p")
    assert overrides.active_overrides() == {"bm25_weight": 3.0}


@pytest.mark.parametrize("bad", ["default", "  ", "", None])
def test_saving_default_or_blank_is_refused(bad):
    with pytest.raises(ProfileError, match="不可保存"):
        services.save_profile(bad, {"bm25_weight": 2.0})


def test_applying_unknown_is_refused():
    with pytest.raises(ProfileError, match="不存在") as err:
        services.apply_profile("ghost")
    assert err.value.status == 404
    with pytest.raises(ProfileError, match="不存在"):
        services.export_profile("ghost")


def test_default_cannot_be_deleted_but_exports_empty():
    with pytest.raises(ProfileError):
        services.delete_profile("default")
    assert services.export_profile("default")["params"] == {}


def test_bootstrap_restores_after_a_reset():
    services.save_profile("alpha", {"ppr_alpha": 0.9})
    services.apply_profile("alpha")
    overrides.reset_cache()  # a restarted process
    assert services.bootstrap_active() == "alpha"
    assert overrides.active_overrides() == {"ppr_alpha": 0.9}


def test_deleting_the_active_profile_falls_back_to_default():
    services.save_profile("boost", {"bm25_weight": 2.0})
    services.apply_profile("boost")
    before = overrides.read_revision()
    services.delete_profile("boost")
    assert services.active_profile_name() == "default"
    assert overrides.active_overrides() == {}
    assert overrides.read_revision() == before + 1
    assert json.loads(Meta.objects.get(key=overrides.ACTIVE_PROFILE_META_KEY).value) == "default"


def test_revision_bumped_on_apply_and_rollback():
    services.save_profile("a", {"ppr_hops": 3})
    assert overrides.read_revision() == 0
    services.apply_profile("a")
    services.rollback_to_default()
    assert overrides.read_revision() == 2


def test_meta_value_is_a_json_string():
    services.save_profile("boost", {"bm25_weight": 2.0})
    services.apply_profile("boost")
    assert Meta.objects.get(key="retrieval_tuning_active_profile").value == '"boost"'


def test_vanished_row_reads_as_default():
    services.save_profile("boost", {"bm25_weight": 2.0})
    services.apply_profile("boost")
    RetrievalProfile.objects.filter(name="boost").delete()  # behind the service's back
    Meta.objects.filter(key=overrides.REVISION_META_KEY).update(value="99")
    overrides.reset_cache()
    assert services.active_profile_name() == "default"
    assert overrides.active_overrides() == {}


# --- the live cache -----------------------------------------------------------------------


def test_cache_reads_the_database_at_most_once_per_second(django_assert_max_num_queries, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(overrides.time, "monotonic", lambda: clock[0])
    overrides.active_overrides()  # primes
    with django_assert_max_num_queries(0):
        for _ in range(1000):
            overrides.tuned("bm25_weight", 1.0)
            overrides.active_overrides()
        clock[0] += 0.99
        overrides.active_overrides()
    clock[0] += 0.02
    with django_assert_max_num_queries(1):  # revision unchanged: one tiny query
        overrides.active_overrides()


def test_another_process_write_is_seen_after_the_refresh_interval(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(overrides.time, "monotonic", lambda: clock[0])
    services.save_profile("boost", {"bm25_weight": 2.0})
    assert overrides.active_overrides() == {}
    # simulate another process: write meta directly, do not touch this process's cache
    Meta.objects.update_or_create(key=overrides.ACTIVE_PROFILE_META_KEY, defaults={"value": '"boost"'})
    Meta.objects.update_or_create(key=overrides.REVISION_META_KEY, defaults={"value": "7"})
    clock[0] += 0.5
    assert overrides.active_overrides() == {}  # still cached
    clock[0] += 0.6
    assert overrides.active_overrides() == {"bm25_weight": 2.0}
    assert overrides.cached_active_profile() == "boost"


def test_overrides_scope_wins_inside_the_block():
    services.save_profile("boost", {"bm25_weight": 2.0})
    services.apply_profile("boost")
    with overrides.overrides_scope({"fact_recall_limit": 3}):
        assert overrides.active_overrides() == {"fact_recall_limit": 3}
        assert overrides.tuned("bm25_weight", 1.0) == 1.0
    assert overrides.active_overrides() == {"bm25_weight": 2.0}


def test_returned_overrides_are_copies():
    services.save_profile("boost", {"bm25_weight": 2.0})
    services.apply_profile("boost")
    overrides.active_overrides()["bm25_weight"] = 5.0
    assert overrides.active_overrides() == {"bm25_weight": 2.0}


# --- another process sees an apply within a second ------------------------------------------

# Times are time.monotonic(), one clock for every process of the machine (CLOCK_MONOTONIC).
WATCHER = r"""
import json, sys, time, django
django.setup()
from memory import overrides

refreshes = []  # (monotonic time the refresh began, the overrides it left in the cache): each read of the database
read = overrides._refresh

def counted(now):
    read(now)
    refreshes.append((now, dict(overrides._cache.overrides or {})))

overrides._refresh = counted
print(json.dumps({"ready": True, "overrides": overrides.active_overrides()}), flush=True)
deadline = time.time() + 30
while time.time() < deadline:
    ov = overrides.active_overrides()
    if ov:
        print(json.dumps({"seen_at": time.monotonic(), "overrides": ov, "refreshes": refreshes}), flush=True)
        break
    time.sleep(0.02)
"""

APPLIER = r"""
import json, time, django
django.setup()
from tuning import services
services.save_profile("hops", {"ppr_hops": 3, "bm25_weight": 2})
r = services.apply_profile("hops")
print(json.dumps({"applied_at": time.monotonic(), "profile": r["profile"]}), flush=True)
"""


def _env(db: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings_test",
            "MEMORY_DB": str(db),
            "PYTHONPATH": str(ROOT),
            "MEMORY_ENQUEUE_TASKS": "False",
        }
    )
    return env


@pytest.mark.integration  # spawns processes
def test_apply_in_one_process_is_seen_by_another_within_a_second(tmp_path):
    db = tmp_path / "live.sqlite3"
    env = _env(db)
    dbenv.migrated_store(env)
    watcher = subprocess.Popen(
        [sys.executable, "-c", WATCHER], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        first = json.loads(watcher.stdout.readline())
        assert first == {"ready": True, "overrides": {}}
        time.sleep(0.3)  # the watcher is now serving from its cache
        applier = subprocess.run(
            [sys.executable, "-c", APPLIER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert applier.returncode == 0, applier.stderr
        applied = json.loads(applier.stdout.strip().splitlines()[-1])
        line = watcher.stdout.readline()
        assert line, watcher.stderr.read()
        seen = json.loads(line)
    finally:
        watcher.kill()
        watcher.wait()
    assert seen["overrides"] == {"ppr_hops": 3, "bm25_weight": 2.0}
    assert isinstance(seen["overrides"]["ppr_hops"], int)
    # "Within a second" is the mechanism, not the wall clock of a loaded machine: the watcher re-reads the database
    # once per REFRESH_INTERVAL_S (never more often), and the first read after the apply returned finds the profile.
    assert overrides.REFRESH_INTERVAL_S == 1.0
    starts = [at for at, _ in seen["refreshes"]]
    assert all(b - a >= overrides.REFRESH_INTERVAL_S for a, b in itertools.pairwise(starts)), starts
    after_apply = [found for at, found in seen["refreshes"] if at >= applied["applied_at"]]
    assert len(after_apply) <= 1, seen["refreshes"]  # one stale read after the apply would be one too many
    assert seen["refreshes"][-1][1] == seen["overrides"]
    assert all(found == {} for _, found in seen["refreshes"][:-1])
    # A failure bound only: the watcher polls every 20 ms, so this holds on a busy machine unless the profile
    # waited for something other than the next refresh.
    assert seen["seen_at"] - applied["applied_at"] <= overrides.REFRESH_INTERVAL_S + 2.0


# --- 83: an applied profile changes the production ranking (no explicit overrides passed) ---------


def test_applied_profile_reaches_the_production_recall_path():
    from memory import selectors
    from memory import services as memory_services
    from memory.engine.scoring import blend_score

    t0 = 1_700_000_000_000
    p = memory_services.resolve_person(platform="qq", external_id="a", name="阿青", at=t0)
    memory_services.add_fact(person_id=p.pk, content="阿青喜欢手冲咖啡", at=t0)

    def recalled():
        (fact,) = selectors.recall_facts_in_scope(person_ids=[p.pk], query="咖啡", now=t0 + 1000, stream_kind="direct")
        return fact

    plain = recalled()
    # default ranking: the only candidate is the pool's relevance unit, plus the retention prior
    assert plain.score == 1.0 + 0.02 * plain.retention
    services.save_profile("multiplied", {"reference_blend": 1})
    services.apply_profile("multiplied")
    multiplied = recalled()  # the reference ranking's bm25 reads the whole table's statistics, the default the person's facts'
    assert multiplied.score == blend_score(multiplied.lexical_relevance, multiplied.retention) != plain.score
    services.save_profile("sharp", {"reference_blend": 1, "bm25_weight": 2.0, "retention_weight_floor": 0.8})
    services.apply_profile("sharp")
    tuned = recalled()
    expected = tuned.lexical_relevance**2 * (0.8 + 0.2 * tuned.retention)
    assert tuned.score == pytest.approx(expected) and tuned.score != plain.score
    services.rollback_to_default()
    assert recalled().score == plain.score


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
@pytest.mark.postgresql_only("SQLite's IMMEDIATE transactions serialise the two writers before they read")
def test_concurrent_applies_never_share_a_revision():
    """Two transactions bump the tuning revision at once: each gets its own number (no lost update)."""
    import threading

    from django.db import connection, transaction

    from memory import overrides

    start = overrides.read_revision()
    first_in, release, got = threading.Event(), threading.Event(), []

    def slow() -> None:
        try:
            with transaction.atomic():
                got.append(overrides.set_active("default"))
                first_in.set()
                release.wait(30)
        finally:
            connection.close()

    def fast() -> None:
        try:
            got.append(overrides.set_active("default"))  # waits for the slow transaction's row lock
        finally:
            connection.close()

    a = threading.Thread(target=slow)
    a.start()
    assert first_in.wait(30)
    b = threading.Thread(target=fast)
    b.start()
    b.join(0.5)
    release.set()
    a.join(30)
    b.join(30)
    assert sorted(got) == [start + 1, start + 2]
    assert overrides.read_revision() == start + 2
