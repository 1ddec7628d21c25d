"""The broker transport: kombu's own, with one Redis client object per channel."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from kombu import Connection, Exchange, Queue

from agentfleet.celery_config import broker_transport
from agentfleet.redis_transport import RedisTransport


def test_redis_and_sentinel_urls_get_the_shared_client_transports() -> None:
    assert broker_transport("redis://127.0.0.1:6379/0") == "agentfleet.redis_transport:RedisTransport"
    assert broker_transport("sentinel://h:26379;sentinel://g:26379").endswith(":SentinelTransport")


def test_tls_and_socket_urls_stay_with_kombus_own() -> None:
    assert broker_transport("rediss://h:6380/0") is None
    assert broker_transport("unix:///tmp/redis.sock") is None


def test_a_channel_builds_its_side_client_once_per_pool(redis_url: str) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        channel = conn.default_channel
        first = channel._create_client()
        assert channel._create_client() is first
        with channel.conn_or_acquire() as client:
            assert client is first
        channel._disconnect_pools()
        assert channel._create_client() is not first


def test_the_consumers_own_client_is_never_the_shared_one(redis_url: str) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        channel = conn.default_channel
        assert channel.client is not channel._create_client()


def test_messages_it_publishes_are_read_by_kombus_stock_transport(redis_url: str, key_prefix: str) -> None:
    queue = Queue(f"{key_prefix}.q", Exchange(f"{key_prefix}.x", type="direct"), routing_key="k")
    with Connection(redis_url, transport=RedisTransport) as ours, Connection(redis_url) as stock:
        with ours.Producer() as producer:
            for n in range(3):
                producer.publish({"n": n}, exchange=queue.exchange, routing_key="k", declare=[queue])
        got = []
        with stock.SimpleQueue(queue) as simple:
            for _ in range(3):
                message = simple.get(timeout=5)
                got.append(message.payload["n"])
                message.ack()
    assert sorted(got) == [0, 1, 2]


def test_looks_while_the_window_is_full_check_for_restorable_messages_once_per_timeout(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = Queue(f"{key_prefix}.q", Exchange(f"{key_prefix}.x", type="direct"), routing_key="k")
    with Connection(redis_url, transport=RedisTransport) as conn:
        with conn.Producer() as producer:
            producer.publish({"n": 1}, exchange=queue.exchange, routing_key="k", declare=[queue])
        channel = conn.default_channel
        channel.basic_qos(prefetch_count=1)
        taken: list[Any] = []
        with conn.Consumer(queue, channel=channel, callbacks=[lambda body, message: taken.append(message)]):
            conn.drain_events(timeout=5)  # the one message fills the window of one
            poller = conn.transport.cycle
            looks, checks = [], []
            look = poller.get
            monkeypatch.setattr(poller, "get", lambda *a, **kw: looks.append(1) or look(*a, **kw))
            monkeypatch.setattr(channel.qos, "restore_visible", lambda **_: checks.append(1))
            with pytest.raises(socket.timeout):
                conn.drain_events(timeout=1.0)  # kombu looks again until the timeout passes
            taken[0].ack()
    assert len(looks) >= 10  # each look came back after 10 ms
    assert len(checks) == 1
