"""kombu's Redis and Sentinel transports, with one Redis client object per channel and a
consumer that notices a free slot at once.

kombu's Redis channel builds a new ``redis.Redis`` object (on its shared connection pool) for
every command it sends outside the consumer's own connection: each publish, each
acknowledgement, each event. redis-py builds a table of some 200 reply callbacks for every
new client object, so on a busy worker or a large dispatch that construction costs more CPU
than the command itself. These transports keep one such object per channel and hand it out
again (a ``redis.Redis`` on a connection pool is safe to share between threads: each command
takes a connection from the pool for itself).

A worker without an event loop (the gevent and eventlet pools) reads messages with
``drain_events(timeout=2.0)``: one ``BRPOP`` per look, and none while its prefetch window is
full. kombu's poller then waits out the whole timeout before it looks again, so a gevent
worker whose every slot was busy stays up to 2 s idle after slots free up; at one message per
look it never catches up (about half of a 100-slot pool busy on 1 s tasks). Here, while the
window is full, the poller looks again every ``FULL_WINDOW_POLL_S`` seconds. kombu's poller
also checks for unacknowledged messages past their visibility timeout after every look that
found nothing (a lock, a ``ZRANGE`` and an unlock in Redis on every tenth): those short looks
make that check no more often than a look of the caller's own timeout would.

Each look takes the prefetch window's room in one script call after its ``BRPOP`` (``intake``).
Acknowledgements of fleet items ride with the next round trip, at most ``ACK_DELAY_S`` later
(``acks``): a worker with an event loop sends the waiting ones from a timer of that loop every
``ACK_DELAY_S``; a consumer without one has a flusher of its own.

Nothing else changes: the queues, messages and acknowledgements are kombu's own, so a plain
Celery worker or client on the same Redis sees the same messages. ``broker_transport``
(this package) selects these classes by the broker URL's scheme, while kombu's private names
they extend hold (``internals``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import redis
from kombu.transport import redis as kombu_redis

from agentfleet.errors import MalformedMessage
from agentfleet.transport.acks import ACK_DELAY_S, BatchedAcks
from agentfleet.transport.diagnosis import shape_problem
from agentfleet.transport.intake import TakeMore
from agentfleet.transport.pools import QuickConnection, QuickPool

__all__ = ["FULL_WINDOW_POLL_S", "RedisTransport", "SentinelTransport"]

#: Seconds between looks at the prefetch window while it is full (no ``BRPOP`` is sent then).
FULL_WINDOW_POLL_S = 0.01


class _SharedClient:
    """A channel mixin: the synchronous client is built once per connection pool."""

    _shared_client: tuple[Any, Any] | None = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        # The asynchronous client carries the consumer's own BRPOP connection: kombu builds it
        # once already, and it must never be shared with commands sent on the side.
        if asynchronous:
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool = self.pool  # type: ignore[attr-defined]
        cached = self._shared_client
        if cached is None or cached[0] is not pool:
            # A new pool (after a reconnect) gets a new client.
            cached = (pool, super()._create_client(asynchronous=False))  # type: ignore[misc]
            self._shared_client = cached
        return cached[1]


class _AckingChannel:
    """A channel mixin: batched acknowledgements, all sent before the channel closes."""

    QoS = BatchedAcks

    def close(self) -> None:
        qos = getattr(self, "_qos", None)
        if isinstance(qos, BatchedAcks) and not getattr(self, "closed", False):
            qos.stop_flusher()
            # Not sent: the entries come back after the visibility timeout, to stored outcomes.
            with contextlib.suppress(Exception):
                qos.flush()
        super().close()  # type: ignore[misc]


class RedisChannel(TakeMore, _AckingChannel, _SharedClient, kombu_redis.Channel):
    """kombu's Redis channel with a shared client, batched acks, the cheaper idle check and
    the pool without the per-command deprecation check (``pools``)."""

    connection_class = QuickConnection

    def _get_pool(self, asynchronous: bool = False) -> Any:
        pool = super()._get_pool(asynchronous)
        if type(pool) is redis.ConnectionPool:
            pool.__class__ = QuickPool  # the same pool; only the method differs
        return pool


class SentinelChannel(TakeMore, _AckingChannel, _SharedClient, kombu_redis.SentinelChannel):
    """kombu's Sentinel channel with a shared client, window-sized takes and batched acks."""


class _Poller(kombu_redis.MultiChannelPoller):
    """kombu's poller, looking again soon while no channel may take a message."""

    # The event loop's timer that sends waiting acknowledgements, and whether there is one
    # (``BatchedAcks`` starts a flusher of its own otherwise).
    _acks_tref: Any = None
    acks_on_timer = False
    # While looks are shortened: seconds between restore checks, and when the next is due.
    _restore_every_s: float | None = None
    _restore_due = 0.0

    def get(self, callback: Any, timeout: float | None = None) -> Any:
        self._restore_every_s = None
        if timeout is not None and self._window_full():
            self._restore_every_s = timeout
            timeout = min(timeout, FULL_WINDOW_POLL_S)
        return super().get(callback, timeout)

    def flush_acks(self) -> None:
        """Send every waiting acknowledgement (the event loop's timer, every ``ACK_DELAY_S``)."""
        for channel in list(self._channels):
            qos = getattr(channel, "_qos", None)
            if isinstance(qos, BatchedAcks):
                qos.flush()

    def maybe_restore_messages(self) -> Any:
        if self._restore_every_s is not None:
            now = time.monotonic()
            if now < self._restore_due:
                return None
            self._restore_due = now + self._restore_every_s
        return super().maybe_restore_messages()

    def _window_full(self) -> bool:
        consuming = [channel for channel in self._channels if channel.active_queues]
        return bool(consuming) and not any(channel.qos.can_consume() for channel in consuming)


class _QuickTransport:
    """A transport mixin: the quick poller, an event loop that sends waiting acks, and the
    queue of the last message delivered (``TakeMore`` takes more after a ``BRPOP`` that
    delivered one from a queue consumed with acknowledgements)."""

    last_queue: str | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # kombu's own Redis transport puts its poller here too, whatever the annotation says.
        self.cycle: Any = _Poller()

    def _deliver(self, message: Any, queue: str) -> None:
        self.last_queue = queue
        problem = shape_problem(message)
        if problem is not None:
            # kombu would record it under no tag, or fail half-way: the reader takes it out.
            raise MalformedMessage(problem)
        super()._deliver(message, queue)  # type: ignore[misc]

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        super().register_with_event_loop(connection, loop)  # type: ignore[misc]
        if self.cycle._acks_tref is not None:
            self.cycle._acks_tref.cancel()
        self.cycle._acks_tref = loop.call_repeatedly(ACK_DELAY_S, self.cycle.flush_acks)
        self.cycle.acks_on_timer = True


class RedisTransport(_QuickTransport, kombu_redis.Transport):
    """kombu's Redis transport (``redis://``) with shared clients and the quick poller."""

    Channel = RedisChannel


class SentinelTransport(_QuickTransport, kombu_redis.SentinelTransport):
    """kombu's Sentinel transport (``sentinel://``) with shared clients and the quick poller."""

    Channel = SentinelChannel
