"""Helpers for the broker transport's tests: queues of a test's own, kombu's stock reader."""

from __future__ import annotations

from typing import Any

from kombu import Connection, Exchange, Queue


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
