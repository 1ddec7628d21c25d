"""Helpers for the broker transport's tests: queues of a test's own, publishing, taking
messages through a transport under test, and kombu's stock reader."""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

from kombu import Connection, Consumer, Exchange, Queue

from agentfleet.transport.acks import ack_later

#: A task name whose acknowledgements may wait, as a fleet task's do; ``FLEET_ITEM`` is the
#: headers of a message of that task (kombu publishes them as a Celery message carries them).
FLEET_TASK = "kombu_support.fleet_item"
FLEET_ITEM = {"task": FLEET_TASK}
ack_later(FLEET_TASK)


def own_queue(key_prefix: str, **options: Any) -> Queue:
    """A direct queue named after ``key_prefix`` (routing key ``k``)."""
    return Queue(f"{key_prefix}.q", Exchange(f"{key_prefix}.x", type="direct"), routing_key="k", **options)


def read_with_stock_kombu(redis_url: str, queue: Queue, count: int) -> list[Any]:
    """The payloads of ``count`` messages read (and acknowledged) by kombu's own transport."""
    payloads = []
    with Connection(redis_url) as stock, stock.SimpleQueue(queue) as simple:
        for _ in range(count):
            message = simple.get(timeout=5)
            payloads.append(message.payload)
            message.ack()
    return payloads


def publish(conn: Connection, queue: Queue, payloads: list[dict[str, Any]], **options: Any) -> None:
    """Publish ``payloads`` to ``queue`` (routing key ``k``) through ``conn``."""
    with conn.Producer() as producer:
        for payload in payloads:
            producer.publish(payload, exchange=queue.exchange, routing_key="k", declare=[queue], **options)


def drain_until(conn: Connection, taken: list[Any], count: int, within_s: float = 10.0) -> None:
    """Look for messages until ``taken`` holds ``count`` (fails after ``within_s`` seconds)."""
    deadline = time.monotonic() + within_s
    while len(taken) < count:
        assert time.monotonic() < deadline, f"took {len(taken)} of {count}"
        with contextlib.suppress(socket.timeout):
            conn.drain_events(timeout=1)


def take(conn: Connection, queue: Queue, *, prefetch: int, count: int) -> tuple[Consumer, list[Any]]:
    """A consumer of ``queue`` on a channel of its own with a window of ``prefetch``, once it
    has taken ``count`` messages (they are in the list, in the order they came)."""
    channel = conn.channel()
    channel.basic_qos(prefetch_count=prefetch)
    taken: list[Any] = []
    consumer = conn.Consumer(queue, channel=channel, callbacks=[lambda body, message: taken.append(message)])
    consumer.consume()
    drain_until(conn, taken, count)
    return consumer, taken
