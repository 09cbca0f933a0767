"""kombu's Redis transport, with an acknowledgement that fails on a dead connection still freeing its slot.

A worker takes at most ``concurrency × CELERY_WORKER_PREFETCH_MULTIPLIER`` messages it has not
acknowledged yet (kombu's QoS). When the connection an acknowledgement goes out on is
half-open (a failover left it blackholed), the ``ack`` times out: kombu logs ``Couldn't ack
…`` and — in its Redis transport — leaves the message counted as unacknowledged in the
worker for ever. With a prefetch of one per process, as here, the worker then takes no
message again and nothing says so: the consumer waits for credit that never comes, and
kombu's check of a stale BRPOP connection skips a consumer that is waiting for credit. The
queue fills up behind a worker that looks alive.

Here such an acknowledgement still frees the slot (the error is raised as before, so Celery
logs it). The message itself stays in Redis's ``unacked`` set, so Redis delivers it again
later (``BROKER_VISIBILITY_TIMEOUT``, or at once when a worker restores it at shutdown):
every task is safe to run twice (docs/DEPLOY.md, "A killed worker"). Selected by
``CELERY_BROKER_TRANSPORT`` (config/settings.py); the URL stays ``redis://``.
"""
from __future__ import annotations

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual


class QoS(kombu_redis.QoS):
    def ack(self, delivery_tag) -> None:
        try:
            super().ack(delivery_tag)
        except self.channel.connection_errors:
            virtual.QoS.ack(self, delivery_tag)  # the worker's count only: Redis keeps the message unacked
            raise

    def reject(self, delivery_tag, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue=requeue)
        except self.channel.connection_errors:
            virtual.QoS.ack(self, delivery_tag)
            raise


class Channel(kombu_redis.Channel):
    QoS = QoS


class Transport(kombu_redis.Transport):
    Channel = Channel
