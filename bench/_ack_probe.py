"""Benchmark instrumentation: when each task message's ``ack()`` was called, kept in Redis.

Installed in a worker process by the benchmark's task module when ``BENCH_ACK_PROBE`` names a
Redis URL: kombu's ``Message.ack`` notes the time of the call (Unix seconds) and, once the call
has returned, writes it to the hash ``bench:ack_called`` under the message's task id. The write
comes after the acknowledgement itself, so it delays none.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from kombu.message import Message

_installed = False


def install() -> None:
    """Wrap ``Message.ack`` once per process, if ``BENCH_ACK_PROBE`` is set."""
    global _installed
    url = os.environ.get("BENCH_ACK_PROBE")
    if not url or _installed:
        return
    _installed = True
    client = redis.Redis.from_url(url)
    real = Message.ack

    def ack(self: Any, multiple: bool = False) -> None:
        called = time.time()
        real(self, multiple=multiple)
        task_id = (self.headers or {}).get("id")
        if task_id:
            client.hset("bench:ack_called", task_id, called)

    Message.ack = ack  # type: ignore[method-assign]
