"""How a worker acknowledges the messages it took from kombu's Redis queues.

kombu acknowledges each message in a round trip of its own (``MULTI``, ``ZREM``, ``HDEL``,
``EXEC``) the moment its task returns. For a fleet item that round trip can wait: a fleet
task's delivery returns the stored outcome when its message comes again, so an
acknowledgement lost with a killed worker repeats no work. ``BatchedAcks`` therefore lets the
acknowledgements of the tasks named with ``ack_later`` (every ``@fleet_task``) wait, at most
``ACK_DELAY_S`` seconds, and sends them with the next message's record (one transaction for
both) or with the others that gathered in the meantime. The message leaves the prefetch window
at once; only its ``unacked`` entry lives a little longer. A worker that dies in between leaves
that entry behind: the message comes back after the visibility timeout and its delivery
returns the stored outcome (``acks_late`` never acknowledges before the task has returned).

Every other message (a plain Celery task, a kombu consumer's own) is acknowledged as kombu
does: its entry is gone from ``unacked`` when ``ack`` returns, and the waiting ones go in the
same transaction.

The bound holds on every pool. A worker with an event loop (prefork, threads, solo) sends the waiting
acknowledgements from a timer of that loop every ``ACK_DELAY_S`` (``redis_channel``); a consumer
without one (Celery's gevent and eventlet pools, a plain ``drain_events`` loop) has
them sent by a flusher, a thread of the channel's own (a greenlet where gevent or eventlet
patched ``threading``) that wakes when the first of them waits and sends them all once it has
waited ``ACK_DELAY_S``. It never waits for the consumer's ``BRPOP`` to return.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps

from agentfleet.transport.malformed import drop_record, not_the_entry

__all__ = ["ACK_BATCH", "ACK_DELAY_S", "BatchedAcks", "ack_later", "acks_wait_for"]

log = logging.getLogger("agentfleet.worker")

#: Seconds an acknowledgement of a fleet item may wait for a round trip to ride with.
ACK_DELAY_S = 0.05

#: Acknowledgements that, once waiting together, are sent at once.
ACK_BATCH = 200

#: Seconds a flusher with nothing to send waits before its thread ends (the next
#: acknowledgement that waits starts it again).
_FLUSHER_IDLE_S = 30.0

# Names of the tasks whose acknowledgements may wait.
_LATER: set[str] = set()


def ack_later(task_name: str) -> None:
    """Let the acknowledgements of ``task_name``'s messages wait up to ``ACK_DELAY_S`` seconds.

    Only for a task whose redelivery repeats no work (a fleet task returns its stored outcome):
    a worker killed before the acknowledgement went out leaves the message to come back after
    the visibility timeout.
    """
    _LATER.add(task_name)


def acks_wait_for(message: Any) -> bool:
    """Whether ``message``'s acknowledgement may wait: a Celery task message (its ``task``
    header) of a task named with ``ack_later``."""
    headers = message.headers
    task = headers.get("task") if isinstance(headers, dict) else None
    # Any header may be anything in a malformed message: only a name can be looked up.
    return isinstance(task, str) and task in _LATER


class _Flusher:
    """Sends one ``BatchedAcks``' waiting acknowledgements once the oldest has waited
    ``ACK_DELAY_S``, from a thread of its own, started when the first one waits."""

    def __init__(self, qos: BatchedAcks) -> None:
        self._qos = qos
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        """An acknowledgement waits: send it within ``ACK_DELAY_S``."""
        with self._lock:
            self._wake.set()
            if self._thread is None and not self._halt.is_set():
                self._thread = threading.Thread(target=self._run, name="agentfleet-acks", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """End the thread (the channel closes; it sends what waits itself)."""
        with self._lock:
            self._halt.set()
            self._wake.set()

    def _idle(self) -> bool:
        # Nothing came for a while: the thread ends unless an acknowledgement just woke it.
        with self._lock:
            if self._wake.is_set():
                return False
            self._thread = None
            return True

    def _run(self) -> None:
        failures = 0
        while True:
            if not self._wake.wait(_FLUSHER_IDLE_S) and self._idle():
                return
            self._wake.clear()
            if self._halt.wait(self._qos.due_in()):
                return
            try:
                self._qos.flush()
                failures = 0
            except Exception as exc:
                # Given back (``_give_back``): tried again, less often while the broker is away.
                failures += 1
                log.debug("could not send waiting acknowledgements: %s", exc)
                if self._halt.wait(min(1.0, ACK_DELAY_S * 2**failures)):
                    return
                self._wake.set()


class BatchedAcks(kombu_redis.QoS):
    """kombu's Redis QoS whose acknowledgements of fleet items ride with the next round trip.

    ``ack`` frees the message's prefetch slot at once. A fleet item's ``unacked`` entry is
    queued for removal: ``append`` (the next message's record) sends the queued removals in its
    own transaction, and the event loop's timer or the flusher sends them within
    ``ACK_DELAY_S`` (see the module docstring). Any other message's entry is removed before
    ``ack`` returns, with the queued ones. ``ack`` is safe to call from the pool's threads or
    greenlets; ``append``, ``room`` and ``recorded`` belong to the consumer.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ack_lock = threading.Lock()
        self._acks: list[str] = []
        self._acks_since = 0.0
        # Tags ``take.lua`` recorded as unacknowledged already: ``append`` writes nothing.
        self._recorded: set[str] = set()
        self._flusher = _Flusher(self)

    def ack(self, delivery_tag: str) -> None:
        message = self._delivered.get(delivery_tag)
        if message is None or not acks_wait_for(message):
            self._ack_now(delivery_tag)
            return
        with self._ack_lock:
            first = not self._acks
            if first:
                self._acks_since = time.monotonic()
            self._acks.append(delivery_tag)
            full = len(self._acks) >= ACK_BATCH
        virtual.QoS.ack(self, delivery_tag)
        if full:
            self.flush()
        elif first:
            self._wake_flusher()

    def _ack_now(self, delivery_tag: str) -> None:
        # kombu's own acknowledgement, with the waiting ones in the same transaction.
        tags = self._take()
        try:
            with self.pipe_or_acquire() as pipe:
                pipe.zrem(self.unacked_index_key, *tags, delivery_tag)
                pipe.hdel(self.unacked_key, *tags, delivery_tag).execute()
        except BaseException:
            self._give_back(tags)
            raise
        virtual.QoS.ack(self, delivery_tag)

    def _wake_flusher(self) -> None:
        # Unless an event loop's timer sends the waiting acknowledgements (``redis_channel``).
        cycle = getattr(self.channel.connection, "cycle", None)
        if not getattr(cycle, "acks_on_timer", False):
            self._flusher.wake()

    def _take(self) -> list[str]:
        with self._ack_lock:
            tags, self._acks = self._acks, []
        return tags

    def _give_back(self, tags: list[str]) -> None:
        # Sending failed (the connection went): the removals wait for the next round trip.
        if not tags:
            return
        with self._ack_lock:
            self._acks = tags + self._acks
            self._acks_since = time.monotonic() - ACK_DELAY_S
        self._wake_flusher()

    def pending(self) -> int:
        """Acknowledgements not sent yet."""
        return len(self._acks)

    def due_in(self) -> float:
        """Seconds until the oldest waiting acknowledgement has waited ``ACK_DELAY_S`` (0 when
        it has, or when none waits)."""
        if not self._acks:
            return 0.0
        return max(0.0, self._acks_since + ACK_DELAY_S - time.monotonic())

    def flush(self) -> None:
        """Send every waiting acknowledgement now, in one transaction."""
        tags = self._take()
        if not tags:
            return
        try:
            with self.pipe_or_acquire() as pipe:
                pipe.zrem(self.unacked_index_key, *tags).hdel(self.unacked_key, *tags).execute()
        except BaseException:
            self._give_back(tags)
            raise

    def stop_flusher(self) -> None:
        """End the flusher's thread (the channel is closing)."""
        self._flusher.stop()

    def room(self) -> int:
        """Messages the prefetch window has room for now (0 without a limit: kombu's one
        message per look)."""
        if not self.prefetch_count:
            return 0
        return self.prefetch_count - (len(self._delivered) - len(self._dirty))

    def recorded(self, tags: list[str]) -> None:
        """Note messages recorded as unacknowledged when they were taken (``take.lua``)."""
        self._recorded.update(tags)

    def forget_recorded(self, tag: str) -> bool:
        """Forget ``tag``'s record if it was never appended (it goes back to its queue);
        False when it was (kombu's own bookkeeping has it)."""
        if tag not in self._recorded:
            return False
        self._recorded.discard(tag)
        return True

    def append(self, message: Any, delivery_tag: str) -> None:
        if delivery_tag in self._recorded:
            self._recorded.discard(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
            return
        tags = self._take()
        if not tags:
            super().append(message, delivery_tag)
            return
        delivery = message.delivery_info
        record = dumps([message._raw, delivery["exchange"], delivery["routing_key"]])
        try:
            with self.pipe_or_acquire() as pipe:
                pipe.zrem(self.unacked_index_key, *tags).hdel(self.unacked_key, *tags)
                pipe.zadd(self.unacked_index_key, {delivery_tag: time.time()})
                pipe.hset(self.unacked_key, delivery_tag, record).execute()
        except BaseException:
            self._give_back(tags)
            raise
        virtual.QoS.append(self, message, delivery_tag)

    def discard(self, tag: str) -> None:
        """Remove ``tag``'s unacknowledged record with the next acknowledgements: a message
        taken and never delivered (it was malformed and went to the receiver instead)."""
        self._recorded.discard(tag)
        with self._ack_lock:
            if not self._acks:
                self._acks_since = time.monotonic()
            self._acks.append(tag)
        self._wake_flusher()

    def restore_by_tag(self, tag: str, client: Any = None, leftmost: bool = False) -> Any:
        try:
            return super().restore_by_tag(tag, client, leftmost)
        except Exception as exc:
            transport = self.channel.connection
            if not_the_entry(exc, (*transport.connection_errors, *transport.channel_errors)):
                raise
            # A record kombu cannot read back (a malformed entry recorded by ``take.lua`` whose
            # worker died before taking it out): out with it, or every restore would fail on it.
            drop_record(self, tag, exc)
            return None

    def restore_unacked(self, client: Any = None) -> Any:
        # At shutdown: the finished messages leave ``unacked`` before the rest go back. With the
        # broker gone the waiting acknowledgements cannot be sent: their messages come back
        # after the visibility timeout and their deliveries return the stored outcome, so the
        # shutdown goes on (kombu's restore below meets the same broker and says so itself).
        try:
            self.flush()
        except Exception as exc:
            log.warning("could not send %d waiting acknowledgements at shutdown: %r", self.pending(), exc)
        return super().restore_unacked(client)
