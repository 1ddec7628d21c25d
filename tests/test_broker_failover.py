"""A broker URL of several Redis servers (``redis://a;redis://b``): when the first does not
answer, kombu fails over to the next, and the connection stays on agentfleet's transport.

Two real Redis servers, the first stopped; the connections are the ones agentfleet's Celery app
makes (a worker's consumer connects the same way).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kombu_support import FLEET_ITEM, own_queue, publish

from agentfleet.celery_config import make_app
from agentfleet.config import load_settings
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.transport.redis_channel import RedisTransport


@pytest.fixture
def first_down() -> Iterator[tuple[str, EmbeddedRedis]]:
    """The broker URL of two servers whose first is stopped, and the second server."""
    with EmbeddedRedis() as first, EmbeddedRedis() as second:
        url = f"{first.url};{second.url}"
        first.stop()
        yield url, second


def _connect(url: str) -> Any:
    app = make_app(load_settings(broker_url=url))
    conn = app.connection_for_write()
    conn.ensure_connection(max_retries=4, interval_start=0, interval_step=0.1)
    return conn


def test_a_connection_that_failed_over_keeps_agentfleets_transport(
    first_down: tuple[str, EmbeddedRedis],
) -> None:
    url, second = first_down
    with _connect(url) as conn:
        assert conn.port == second.port
        assert isinstance(conn.transport, RedisTransport)
        with conn.clone() as again:
            assert isinstance(again.transport, RedisTransport)


def test_messages_flow_through_the_failed_over_connection_with_window_sized_takes(
    first_down: tuple[str, EmbeddedRedis], key_prefix: str
) -> None:
    url, _ = first_down
    queue = own_queue(key_prefix)
    with _connect(url) as conn:
        publish(conn, queue, [{"n": n} for n in range(4)], headers=FLEET_ITEM)
        channel = conn.channel()
        channel.basic_qos(prefetch_count=4)
        taken: list[Any] = []
        with conn.Consumer(queue, channel=channel, callbacks=[lambda body, message: taken.append(message)]):
            conn.drain_events(timeout=5)
            # One look took the whole window: agentfleet's take, not kombu's one per BRPOP.
            assert [m.payload["n"] for m in taken] == [0, 1, 2, 3]
            for message in taken:
                message.ack()
