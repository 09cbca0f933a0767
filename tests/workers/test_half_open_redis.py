"""Half-open Redis connections (a failover left the old ones blackholed): one retry on a fresh connection.

The process's redis-py pool holds a connection opened through a TCP proxy in front of the
real Redis; the proxy then blackholes it (it stays open, nothing is forwarded) while new
connections reach Redis. A stream check, a stored message's checks and the beat's sweep
must get through on a fresh connection instead of giving up until the next sweep.
"""
from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest

from memory import broker
from memory.dispatch import enqueue
from memory.pipeline import tasks
from tests.redis_url import TEST_REDIS_URL
from tests.tcp_proxy import TcpProxy
from tests.workers.conftest import make_stream, post_messages

pytestmark = pytest.mark.django_db


@pytest.fixture
def proxied(settings, redis_db):
    parts = urlsplit(TEST_REDIS_URL)
    proxy = TcpProxy(parts.port or 6379, target_host=parts.hostname or "127.0.0.1")
    settings.REDIS_URL = urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))  # the test database, proxied
    broker.reset()
    yield proxy
    broker.reset()
    proxy.close()


def _half_open(proxy: TcpProxy) -> None:
    """The pool holds a connection; it goes half-open, new ones work."""
    assert broker.client().ping()
    assert proxy.open_connections == 1
    proxy.blackhole()
    proxy.heal()


def test_the_settings_give_every_pool_keepalive_and_a_health_check(settings):
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    assert options["socket_keepalive"] is True and options["socket_keepalive_options"]
    assert 0 < options["health_check_interval"] <= 30
    assert options["socket_timeout"] and options["socket_connect_timeout"]
    kwargs = broker.client().connection_pool.connection_kwargs
    assert kwargs["socket_keepalive"] is True and kwargs["socket_keepalive_options"]
    assert kwargs["health_check_interval"] == settings.REDIS_HEALTH_CHECK_INTERVAL


def test_a_stream_check_on_a_half_open_connection_is_sent_on_a_fresh_one(proxied, burst):
    stream = make_stream()
    _half_open(proxied)

    assert enqueue.stream_check("summarize", stream.pk, check_due=False) is True

    assert burst.names() == ["summarize_stream_task"]
    assert not broker.is_down()
    assert proxied.open_connections == 1  # the fresh one


def test_a_stored_message_reaches_redis_past_a_half_open_connection(proxied, burst, settings):
    settings.MESSAGE_VECTOR_DELAY = -1
    stream = make_stream()
    post_messages(stream, 48)
    _half_open(proxied)

    enqueue.stream_checks(stream.pk)

    assert sorted(burst.names()) == ["extract_stream_task", "summarize_stream_task"]
    assert not broker.is_down()


def test_the_sweep_runs_past_a_half_open_connection_and_an_open_breaker(proxied, burst):
    due, other = make_stream("g1"), make_stream("g2")
    post_messages(due, 48)
    post_messages(other, 48, start=100)
    _half_open(proxied)
    broker.mark_down(TimeoutError("an earlier failure of this process"))

    assert tasks.stream_checks_sweep_task() == 4

    assert sorted(burst.names()) == ["extract_stream_task", "extract_stream_task", "summarize_stream_task",
                                     "summarize_stream_task"]


def test_a_sweep_while_redis_hangs_gives_up_after_one_retry(proxied, burst):
    due = make_stream("g1")
    post_messages(due, 48)
    assert broker.client().ping()
    proxied.blackhole()  # and stays so: new connections hang too

    assert tasks.stream_checks_sweep_task() == 0

    assert burst.calls == []
    assert broker.is_down()


def test_an_ack_lost_on_a_dead_connection_frees_the_workers_slot(proxied, settings):
    """kombu's own Redis transport keeps the message counted: with a prefetch of one the worker never
    takes another (config/broker_transport.py)."""
    from kombu import Connection, Exchange, Queue

    connection = Connection(settings.REDIS_URL, transport=settings.CELERY_BROKER_TRANSPORT,
                            transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS)
    try:
        channel = connection.channel()
        queue = Queue("faults-ack", Exchange("faults-ack", type="direct"), routing_key="faults-ack")(channel)
        queue.declare()
        channel.basic_qos(0, 1, False)  # a worker process's prefetch
        connection.Producer(channel).publish({"n": 1}, exchange=queue.exchange, routing_key="faults-ack")
        message = queue.get(no_ack=False)
        assert message is not None and not channel.qos.can_consume()

        proxied.blackhole()
        with pytest.raises(connection.connection_errors):
            message.ack()

        assert channel.qos.can_consume()  # the worker takes the next message once the connection is back
        proxied.heal()
    finally:
        proxied.heal()
        connection.release()
