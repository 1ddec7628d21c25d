"""The broker transport: kombu's own, with one Redis client object per channel."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
import redis
from kombu import Connection
from kombu_support import FLEET_ITEM, drain_until, own_queue, publish, read_with_stock_kombu, take

from agentfleet.transport import acks as redis_acks
from agentfleet.transport import broker_transport
from agentfleet.transport.acks import BatchedAcks
from agentfleet.transport.redis_channel import RedisTransport


def test_redis_and_sentinel_urls_get_the_shared_client_transports() -> None:
    assert broker_transport("redis://127.0.0.1:6379/0") == "agentfleet.transport.redis_channel:RedisTransport"
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
    queue = own_queue(key_prefix)
    with Connection(redis_url, transport=RedisTransport) as ours:
        publish(ours, queue, [{"n": n} for n in range(3)])
    assert sorted(p["n"] for p in read_with_stock_kombu(redis_url, queue, 3)) == [0, 1, 2]


def test_looks_while_the_window_is_full_check_for_restorable_messages_once_per_timeout(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = own_queue(key_prefix)
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


def _unacked(redis_url: str) -> set[str]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return set(client.hkeys("unacked"))
    finally:
        client.close()


def test_an_ack_frees_its_slot_at_once_and_rides_with_the_next_messages_record(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_acks, "ACK_DELAY_S", 30.0)  # only the next record sends it
    queue = own_queue(key_prefix)
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(2)], headers=FLEET_ITEM)
        consumer, taken = take(conn, queue, prefetch=1, count=1)
        with consumer:
            first = taken[0]
            first.ack()
            assert consumer.channel.qos.can_consume()  # the prefetch slot is free already
            assert first.delivery_tag in _unacked(redis_url)  # its entry waits for a round trip
            client = redis.Redis.from_url(redis_url)
            execs = int(client.info("commandstats")["cmdstat_exec"]["calls"])
            drain_until(conn, taken, 2)
            second = taken[1]
            # One transaction removed the first entry and recorded the second (the INFO call
            # itself is not a transaction).
            assert int(client.info("commandstats")["cmdstat_exec"]["calls"]) == execs + 1
            client.close()
            left = _unacked(redis_url)
            assert first.delivery_tag not in left and second.delivery_tag in left
            second.ack()
        # Closing the channel sends the acknowledgement still waiting.
    assert second.delivery_tag not in _unacked(redis_url)


def test_a_fleet_items_waiting_ack_is_sent_within_the_delay_with_no_look_at_all(
    redis_url: str, key_prefix: str
) -> None:
    queue = own_queue(key_prefix)
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": 0}], headers=FLEET_ITEM)
        consumer, taken = take(conn, queue, prefetch=4, count=1)
        with consumer:
            taken[0].ack()
            assert consumer.channel.qos.pending() == 1
            # No drain_events from here on (a gevent worker's consumer sits in a one-second
            # BRPOP): the channel's flusher sends it.
            started = time.monotonic()
            while taken[0].delivery_tag in _unacked(redis_url):
                assert time.monotonic() - started < 5, "the ack was never sent"
                time.sleep(0.005)


def test_closing_sends_waiting_acks_and_gives_back_only_the_unfinished(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_acks, "ACK_DELAY_S", 30.0)  # only closing sends it
    queue = own_queue(key_prefix)
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(2)], headers=FLEET_ITEM)
        consumer, taken = take(conn, queue, prefetch=2, count=2)
        with consumer:
            taken[0].ack()  # finished; the other is still running when the worker stops
            tags = {m.delivery_tag for m in taken}
    assert not tags & _unacked(redis_url)
    with Connection(redis_url) as stock, stock.SimpleQueue(queue) as simple:
        back = simple.get(timeout=5)
        back.ack()
        with pytest.raises(simple.Empty):
            simple.get(timeout=0.5)
    assert back.payload == taken[1].payload


def test_an_ack_that_could_not_be_sent_goes_with_the_next_round_trip(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = own_queue(key_prefix)
    with Connection(redis_url, transport=RedisTransport) as conn:
        # As under an event loop: only its timer (here, the test) sends waiting acks.
        conn.transport.cycle.acks_on_timer = True
        publish(conn, queue, [{"n": 0}], headers=FLEET_ITEM)
        consumer, taken = take(conn, queue, prefetch=1, count=1)
        with consumer:
            qos = consumer.channel.qos
            assert isinstance(qos, BatchedAcks)
            taken[0].ack()
            real = qos.pipe_or_acquire

            def broken(*args: Any, **kwargs: Any) -> Any:
                raise redis.ConnectionError("connection reset")

            monkeypatch.setattr(qos, "pipe_or_acquire", broken)
            with pytest.raises(redis.ConnectionError):
                qos.flush()
            assert qos.pending() == 1 and taken[0].delivery_tag in _unacked(redis_url)
            monkeypatch.setattr(qos, "pipe_or_acquire", real)
            qos.flush()
            assert qos.pending() == 0 and taken[0].delivery_tag not in _unacked(redis_url)
