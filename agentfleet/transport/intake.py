"""How a worker takes messages from kombu's Redis queues and acknowledges them.

kombu's Redis channel takes one message per ``BRPOP`` round trip and then records it as
unacknowledged in a second one (``MULTI``, ``ZADD``, ``HSET``, ``EXEC``); a worker killed
between the two loses the message (the reconciler publishes it again, ``tasks/reconciler.py``).
With a backlog waiting, that is two round trips and two parses per message: the start-up work
of a gevent worker taking thousands of messages at once. ``TakeMore`` keeps the ``BRPOP`` for the
first message of a look, then takes the rest of what the prefetch window has room for (at
most ``TAKE_MORE``) from the same queue in one script call, ``transport/scripts/take.lua``,
which records each message as unacknowledged in the same atomic step: those messages are never
out of both the queue and the record.

kombu also acknowledges each message in a round trip of its own (``MULTI``, ``ZREM``,
``HDEL``, ``EXEC``) the moment its task returns. ``BatchedAcks`` lets acknowledgements wait,
at most ``ACK_DELAY_S`` seconds, and sends them with the next message's record (one
transaction for both) or with the others that gathered in the meantime. The message leaves the
prefetch window at once; only its ``unacked`` entry lives a little longer. A worker that dies
in between leaves that entry behind: the message comes back after the visibility timeout and
its delivery returns the stored outcome (``acks_late`` never acknowledges before the task has
returned).

An entry of either read that is not a message a worker can take (not JSON, not kombu's
envelope, a body that does not decode, refused by Celery) is taken out of the queue, its record
forgotten, and handed to the receiver of ``transport.malformed`` (a dead letter of category
``malformed``); the messages taken with it are delivered in order and the look goes on. Only
what is not the entry's fault (a broken connection, a Redis error) stops the delivery: then the
messages not handed over go back to the front of their queue, as before.

The records, queues and message format are kombu's own: a plain Celery worker on the same Redis
restores, reads and acknowledges the same messages.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps

from agentfleet.lua import ScriptSet
from agentfleet.transport.malformed import Taken, drop_record, hand_over, not_the_entry, note_replies

__all__ = ["ACK_BATCH", "ACK_DELAY_S", "TAKE_MORE", "TRANSPORT_LUA", "BatchedAcks", "TakeMore"]

#: The transport's scripts (``agentfleet/transport/scripts/``).
TRANSPORT_LUA = ScriptSet("agentfleet.transport", "scripts")

#: Messages one script call takes at most, after the one a ``BRPOP`` brought.
TAKE_MORE = 100

log = logging.getLogger("agentfleet.worker")

#: Seconds an acknowledgement may wait for a round trip to ride with.
ACK_DELAY_S = 0.05

#: Acknowledgements that, once waiting together, are sent at once.
ACK_BATCH = 200


class BatchedAcks(kombu_redis.QoS):
    """kombu's Redis QoS whose acknowledgements ride with the next round trip.

    ``ack`` frees the message's prefetch slot at once and queues the removal of its
    ``unacked`` entry; ``append`` (the next message's record) sends the queued removals in its
    own transaction; the consumer loop sends those waiting ``ACK_DELAY_S`` (``flush_due``).
    ``ack`` is safe to call from the pool's threads or greenlets; ``append``, ``room`` and
    ``recorded`` belong to the consumer.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ack_lock = threading.Lock()
        self._acks: list[str] = []
        self._acks_since = 0.0
        # Tags ``take.lua`` recorded as unacknowledged already: ``append`` writes nothing.
        self._recorded: set[str] = set()

    def ack(self, delivery_tag: str) -> None:
        with self._ack_lock:
            if not self._acks:
                self._acks_since = time.monotonic()
            self._acks.append(delivery_tag)
            full = len(self._acks) >= ACK_BATCH
        virtual.QoS.ack(self, delivery_tag)
        if full:
            self.flush()

    def _take(self) -> list[str]:
        with self._ack_lock:
            tags, self._acks = self._acks, []
        return tags

    def _give_back(self, tags: list[str]) -> None:
        # Sending failed (the connection went): the removals wait for the next round trip.
        with self._ack_lock:
            self._acks = tags + self._acks
            self._acks_since = time.monotonic() - ACK_DELAY_S

    def pending(self) -> int:
        """Acknowledgements not sent yet."""
        return len(self._acks)

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

    def flush_due(self) -> None:
        """Send the waiting acknowledgements once the oldest has waited ``ACK_DELAY_S``."""
        if self._acks and time.monotonic() - self._acks_since >= ACK_DELAY_S:
            self.flush()

    def room(self) -> int:
        """Messages the prefetch window has room for now (``TAKE_MORE`` if it has no limit)."""
        if not self.prefetch_count:
            return TAKE_MORE
        return self.prefetch_count - (len(self._delivered) - len(self._dirty))

    def recorded(self, tags: Iterable[str]) -> None:
        """Note messages recorded as unacknowledged when they were taken (``take.lua``)."""
        self._recorded.update(tags)

    def discard(self, tag: str) -> None:
        """Remove ``tag``'s unacknowledged record with the next acknowledgements: a message
        taken and never delivered (it was malformed and went to the receiver instead)."""
        self._recorded.discard(tag)
        with self._ack_lock:
            if not self._acks:
                self._acks_since = time.monotonic()
            self._acks.append(tag)

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
        # At shutdown: the finished messages leave ``unacked`` before the rest go back.
        self.flush()
        return super().restore_unacked(client)


class TakeMore:
    """A channel mixin: after the message a ``BRPOP`` brought, the rest of the window's room
    from the same queue in one ``take.lua`` call; an entry of either that cannot be delivered
    goes to the malformed receiver (see the module docstring)."""

    _take_script: tuple[Any, Any] | None = None
    # The reply to the running BRPOP, ``(list, raw message)``, noted as redis-py parses it.
    _popped: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Queues consumed with acknowledgements (by consumer tag): only those take more.
        self._acking: dict[str, str] = {}

    def basic_consume(self, queue: str, no_ack: bool, *args: Any, **kwargs: Any) -> Any:
        consumer_tag = kwargs.get("consumer_tag", args[1] if len(args) > 1 else None)
        if not no_ack and consumer_tag is not None:
            self._acking[consumer_tag] = queue
        return super().basic_consume(queue, no_ack, *args, **kwargs)  # type: ignore[misc]

    def basic_cancel(self, consumer_tag: str) -> Any:
        self._acking.pop(consumer_tag, None)
        return super().basic_cancel(consumer_tag)  # type: ignore[misc]

    def _create_client(self, asynchronous: bool = False) -> Any:
        client = super()._create_client(asynchronous=asynchronous)  # type: ignore[misc]
        if asynchronous:
            # The consumer's own client: its BRPOP replies are noted, so that an entry kombu
            # cannot read is still at hand (``malformed``).
            note_replies(client, "BRPOP", self._note_popped)
        return client

    def _note_popped(self, reply: Any) -> None:
        self._popped = reply

    def _brpop_read(self, **options: Any) -> Any:
        transport = self.connection  # type: ignore[attr-defined]
        transport.last_queue = None
        self._popped = None
        try:
            delivered = super()._brpop_read(**options)  # type: ignore[misc]
        except Exception as exc:
            popped, self._popped = self._popped, None
            if not popped or not_the_entry(exc, self._read_errors()):
                raise
            # The entry popped could not be read or delivered: out to the receiver, and the
            # look goes on with the rest of the window.
            queue = bytes_to_str(popped[0]).rsplit(self.sep, 1)[0]  # type: ignore[attr-defined]
            self._take_out(Taken.of(popped[1]), queue, exc)
            self._take_more(queue)
            return True
        if transport.last_queue:
            self._take_more(transport.last_queue)
        return delivered

    def _read_errors(self) -> tuple[type[BaseException], ...]:
        transport = self.connection  # type: ignore[attr-defined]
        return (*transport.connection_errors, *transport.channel_errors)

    def _take_out(self, taken: Taken, queue: str, exc: BaseException | None = None) -> None:
        """Hand a malformed entry to the receiver, and forget its record: the script's (it was
        never delivered) or the window's (delivered, then refused)."""
        qos: Any = self.qos  # type: ignore[attr-defined]
        if taken.tag and isinstance(qos, BatchedAcks):
            if qos.forget_recorded(taken.tag):
                qos.discard(taken.tag)
            else:
                try:
                    qos.get(taken.tag)
                except KeyError:
                    pass  # never recorded
                else:
                    qos.ack(taken.tag)
        hand_over(taken.entry(queue, exc))

    def _give_back(self, rest: list[Taken], queue: str) -> None:
        # The messages not handed over go back to the front of their queue, in order (the last
        # first: each is pushed on the end the next pop takes from; kombu's ``leftmost`` is the
        # other end). Those the script did not record go back as they were.
        qos: Any = self.qos  # type: ignore[attr-defined]
        for taken in reversed(rest):
            if not taken.recorded:
                self._create_client().rpush(queue, taken.raw)
            elif qos.forget_recorded(taken.tag):
                qos.restore_by_tag(taken.tag, leftmost=False)

    def _script(self) -> Any:
        client = self._create_client()
        cached = self._take_script
        if cached is None or cached[0] is not client:
            cached = self._take_script = (client, TRANSPORT_LUA.register(client, "take")["take"])
        return cached[1]

    def _take_more(self, queue: str) -> None:
        channel: Any = self
        qos = channel.qos
        if not isinstance(qos, BatchedAcks) or channel.global_keyprefix or channel._closing:
            return
        if queue not in self._acking.values():
            # A consumer that never acknowledges (Celery's control replies) keeps kombu's one
            # message per look: it records nothing, and counts looks to know when to stop.
            return
        room = min(qos.room(), TAKE_MORE)
        if room <= 0:
            return
        lists = [channel._q_for_pri(queue, pri) for pri in channel.priority_steps]
        try:
            taken = self._script()(
                keys=[*lists, qos.unacked_index_key, qos.unacked_key], args=[room, time.time()]
            )
        except Exception as exc:
            # Taken and recorded, or not taken: a message recorded but never delivered comes
            # back after the visibility timeout (or through the reconciler).
            log.warning("could not take more messages from %s: %s", queue, exc)
            return
        entries = [Taken.of(item) for item in taken]
        qos.recorded([entry.tag for entry in entries if entry.recorded and entry.tag])
        for n, entry in enumerate(entries):
            if entry.payload is None:
                self._take_out(entry, queue)
                continue
            try:
                channel.connection._deliver(entry.payload, queue)
            except Exception as exc:
                if not_the_entry(exc, self._read_errors()):
                    self._give_back(entries[n:], queue)
                    raise
                self._take_out(entry, queue, exc)
            except BaseException:
                self._give_back(entries[n:], queue)
                raise
