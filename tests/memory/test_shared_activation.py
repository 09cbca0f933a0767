"""Short-term activation shared through Redis (issue 12, item 6): several hosts spread alike.

Two :class:`SharedActivation` objects stand for two processes (each has its own local
table); what one touches, the other sees. Without Redis each falls back to its own table.
"""
from __future__ import annotations

import pytest
import redis

from memory import broker, selectors, services
from memory.engine.spreading import ACTIVATION_TAU_MS, ShortTermActivation
from memory.models import MemoryNode
from memory.search.activation import KEY, SharedActivation
from tests.memory.conftest import NOW
from tests.redis_url import TEST_REDIS_URL


@pytest.fixture
def shared_redis(settings):
    settings.REDIS_URL = TEST_REDIS_URL
    settings.SHORT_TERM_ACTIVATION = "redis"
    client = redis.Redis.from_url(TEST_REDIS_URL)
    try:
        client.ping()
    except redis.exceptions.ConnectionError:
        pytest.fail(f"no Redis at {TEST_REDIS_URL}")
    client.flushdb()
    broker.reset()
    yield client
    client.flushdb()
    broker.reset()


def test_a_touch_in_one_process_is_seen_by_another(shared_redis):
    web, worker = SharedActivation(), SharedActivation()
    assert worker.factor(7, NOW) == 1.0
    web.touch([7, 8], NOW)
    assert worker.factors([7, 8, 9], NOW) == {7: 2.0, 8: 2.0, 9: 1.0}
    assert worker.factor(7, NOW + ACTIVATION_TAU_MS) == pytest.approx(1.367879, abs=1e-6)
    assert len(worker.local) == 0  # the answer came from Redis, not from its own table
    assert shared_redis.zscore(KEY, "7") == NOW
    assert 0 < shared_redis.pttl(KEY) <= 40 * ACTIVATION_TAU_MS


def test_the_same_factors_as_the_per_process_table(shared_redis):
    shared, local = SharedActivation(), ShortTermActivation()
    for nodes, at in [([1, 2, 3], NOW), ([2], NOW + 60_000), ([4], NOW + 5 * ACTIVATION_TAU_MS)]:
        shared.touch(nodes, at)
        local.touch(nodes, at)
    for now in (NOW, NOW + 120_000, NOW + 6 * ACTIVATION_TAU_MS, NOW + 41 * ACTIVATION_TAU_MS):
        assert shared.factors(range(6), now) == local.factors(range(6), now)


def test_old_touches_are_pruned_and_a_late_touch_never_moves_back(shared_redis):
    act = SharedActivation()
    act.touch(range(100), 0)
    act.touch([5], 50 * ACTIVATION_TAU_MS)
    assert len(act) == 1  # the 40 τ old ones went (their factor is exactly 1.0 anyway)
    act.touch([5], 50 * ACTIVATION_TAU_MS - 1000)  # a replayed, older touch
    assert shared_redis.zscore(KEY, "5") == 50 * ACTIVATION_TAU_MS
    act.clear()
    assert shared_redis.exists(KEY) == 0 and len(act.local) == 0


def test_without_redis_each_process_keeps_its_own(settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    broker.reset()
    act = SharedActivation()
    act.touch([3], NOW)  # no error: the breaker opens, the local table has it
    assert broker.is_down()
    assert act.factors([3, 4], NOW) == {3: 2.0, 4: 1.0}
    assert SharedActivation().factor(3, NOW) == 1.0  # another process does not know it
    broker.reset()


def test_spreading_reads_the_shared_activation(shared_redis, person):
    """Two neighbours of a seed with equal edges: the one another process just recalled ranks first."""
    seed = services.add_fact(person_id=person.pk, content="他在学吉他", kind="爱好", at=NOW).fact_id
    a = services.add_fact(person_id=person.pk, content="他养了一只猫", kind="宠物", at=NOW).fact_id
    b = services.add_fact(person_id=person.pk, content="他住在杭州", kind="住址", at=NOW).fact_id
    services.link_together(refs=[("fact", seed), ("fact", a)], at=NOW)
    services.link_together(refs=[("fact", seed), ("fact", b)], at=NOW)
    node_b = MemoryNode.objects.get(ref_kind="fact", ref_id=b).pk

    def order(activation):
        result = selectors.spread(seeds=[("fact", seed, 1.0)], now=NOW, hops=1, limit=4, activation=activation,
                                  events=False, use_concepts=False)
        return [(h.ref_id, round(h.score, 9)) for h in result.hits]

    plain = order(None)
    assert {r for r, _ in plain} == {a, b}
    SharedActivation().touch([node_b], NOW)  # "another host" recalled b a moment ago
    boosted = order(SharedActivation())
    assert boosted[0][0] == b
    assert dict(boosted)[b] == pytest.approx(2 * dict(plain)[b])
    assert dict(boosted)[a] == pytest.approx(dict(plain)[a])
    assert selectors.short_term_activation().factor(node_b, NOW) == 2.0  # the deployment's activation is shared
