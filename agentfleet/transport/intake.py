"""How a worker takes messages from kombu's Redis queues.

kombu's Redis channel takes one message per ``BRPOP`` round trip and then records it as
unacknowledged in a second one (``MULTI``, ``ZADD``, ``HSET``, ``EXEC``); a worker killed
between the two loses the message (the reconciler publishes it again, ``tasks/reconciler.py``).
With a backlog waiting, that is two round trips and two parses per message: the start-up work
of a gevent worker taking thousands of messages at once. ``TakeMore`` keeps the ``BRPOP`` for the
first message of a look, then takes the rest of what the prefetch window has room for (at
most ``TAKE_MORE``) in one script call, ``transport/scripts/take.lua``, which records each
message as unacknowledged in the same atomic step: those messages are never out of both the
queue and the record.

The script takes them in the order kombu's own ``BRPOP`` looks would have: across every queue
the channel consumes, highest priority step first, the queues of one step in the channel's
queue cycle, and (with kombu's default round-robin cycle) the queue just taken from moved to
the end of that cycle after each message. So a high-priority message of any queue comes before
a lower one of the queue the ``BRPOP`` answered, and queues of one priority take turns. It stops
before a message of a queue consumed without acknowledgements (kombu's next ``BRPOP`` takes
that one). A consumer without a prefetch limit takes one message per look, as kombu's does.

An entry of either read that is not a message a worker can take (not JSON, not kombu's
envelope, a body that does not decode, refused by Celery) is taken out of the queue, its record
forgotten, and handed to the receiver of ``transport.malformed`` (a dead letter of category
``malformed``); the messages taken with it are delivered in order and the look goes on. Only
what is not the entry's fault (a broken connection, a Redis error) stops the delivery: then the
messages not handed over go back to the front of their queue, as before.

The records, queues and message format are kombu's own: a plain Celery worker on the same Redis
restores, reads and acknowledges the same messages. Acknowledgements: ``acks``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from kombu.utils.encoding import bytes_to_str
from kombu.utils.scheduling import round_robin_cycle

from agentfleet.lua import ScriptSet
from agentfleet.transport.acks import BatchedAcks
from agentfleet.transport.malformed import Taken, hand_over, not_the_entry, note_replies

__all__ = ["TAKE_MORE", "TRANSPORT_LUA", "TakeMore"]

#: The transport's scripts (``agentfleet/transport/scripts/``).
TRANSPORT_LUA = ScriptSet("agentfleet.transport", "scripts")

#: Messages one script call takes at most, after the one a ``BRPOP`` brought.
TAKE_MORE = 100

log = logging.getLogger("agentfleet.worker")


class TakeMore:
    """A channel mixin: after the message a ``BRPOP`` brought, the rest of the window's room
    from the queues it consumes in one ``take.lua`` call; an entry of either that cannot be
    delivered goes to the malformed receiver (see the module docstring)."""

    _take_script: tuple[Any, Any] | None = None
    # The reply to the running BRPOP, ``(list, raw message)``, noted as redis-py parses it.
    _popped: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Queues consumed with acknowledgements (by consumer tag): only those take more.
        self._acking: dict[str, str] = {}
        # Each queue's lists, highest priority step first.
        self._lists: dict[str, list[str]] = {}

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

    def _give_back(self, rest: list[Taken], sources: list[str]) -> None:
        # The messages not handed over go back to the front of their queue, in order (the last
        # first: each is pushed on the end the next pop takes from; kombu's ``leftmost`` is the
        # other end). Those the script did not record go back as they were.
        qos: Any = self.qos  # type: ignore[attr-defined]
        for taken, queue in zip(reversed(rest), reversed(sources), strict=True):
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

    def _lists_of(self, queue: str) -> list[str]:
        lists = self._lists.get(queue)
        if lists is None:
            channel: Any = self
            lists = self._lists[queue] = [channel._q_for_pri(queue, pri) for pri in channel.priority_steps]
        return lists

    def _take_more(self, queue: str) -> None:
        channel: Any = self
        qos = channel.qos
        if not isinstance(qos, BatchedAcks) or channel.global_keyprefix or channel._closing:
            return
        acking = set(self._acking.values())
        if queue not in acking:
            # A consumer that never acknowledges (Celery's control replies) keeps kombu's one
            # message per look: it records nothing, and counts looks to know when to stop.
            return
        room = min(qos.room(), TAKE_MORE)
        if room <= 0:
            return
        cycle = channel._queue_cycle
        # The queues in the order kombu's next BRPOP would name them (``_brpop_start``).
        queues = cycle.consume(len(channel.active_queues))
        keys = [key for name in queues for key in self._lists_of(name)]
        rotates = getattr(type(cycle), "rotate", None) is round_robin_cycle.rotate
        likely = queues.index(queue) + 1 if queue in queues else 0
        args = [room, time.time(), int(rotates), likely, *(int(name in acking) for name in queues)]
        try:
            origins, taken = self._script()(keys=[*keys, qos.unacked_index_key, qos.unacked_key], args=args)
        except Exception as exc:
            # Taken and recorded, or not taken: a message recorded but never delivered comes
            # back after the visibility timeout (or through the reconciler).
            log.warning("could not take more messages from %s: %s", queue, exc)
            return
        entries = [Taken.of(item) for item in taken]
        sources = [queues[int(origin) - 1] for origin in origins]
        qos.recorded([entry.tag for entry in entries if entry.recorded and entry.tag])
        for n, entry in enumerate(entries):
            source = sources[n]
            cycle.rotate(source)
            if entry.payload is None:
                self._take_out(entry, source)
                continue
            try:
                channel.connection._deliver(entry.payload, source)
            except Exception as exc:
                if not_the_entry(exc, self._read_errors()):
                    self._give_back(entries[n:], sources[n:])
                    raise
                self._take_out(entry, source, exc)
            except BaseException:
                self._give_back(entries[n:], sources[n:])
                raise
