"""Which acknowledgements wait and which do not: a fleet item's may ride with the next round trip;
any other message (a plain Celery task, a kombu consumer's own) is acknowledged as kombu's own
transport does, its ``unacked`` entry gone when ``ack`` returns.

Against a real Redis with kombu connections.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
from kombu import Connection
from kombu.asynchronous.hub import Hub
from kombu_support import FLEET_ITEM, own_queue, publish, take

from agentfleet.transport import acks
from agentfleet.transport.redis_channel import RedisTransport


def _unacked(client: redis.Redis) -> set[str]:
    return set(client.hkeys("unacked"))


def _execs(client: redis.Redis) -> int:
    return int(client.info("commandstats")["cmdstat_exec"]["calls"])


@pytest.mark.parametrize(
    "headers", [{}, {"task": "myapp.plain_celery_task"}], ids=["kombu message", "plain Celery task"]
)
def test_a_messages_entry_has_left_unacked_when_its_ack_returns(
    redis_url: str, key_prefix: str, redis_client: redis.Redis, headers: dict[str, str]
) -> None:
    queue = own_queue(key_prefix)
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(3)], headers=headers)
        consumer, taken = take(conn, queue, prefetch=3, count=3)
        with consumer:
            assert {m.delivery_tag for m in taken} <= _unacked(redis_client)
            for message in taken:
                message.ack()
                assert message.delivery_tag not in _unacked(redis_client)
            assert consumer.channel.qos.pending() == 0


def test_an_ack_that_does_not_wait_takes_the_waiting_ones_along(
    redis_url: str, key_prefix: str, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acks, "ACK_DELAY_S", 30.0)
    queue = own_queue(key_prefix)
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(2)], headers=FLEET_ITEM)
        publish(conn, queue, [{"n": 2}])
        consumer, taken = take(conn, queue, prefetch=3, count=3)
        with consumer:
            fleet_items, plain = taken[:2], taken[2]
            for message in fleet_items:
                message.ack()
            assert {m.delivery_tag for m in fleet_items} <= _unacked(redis_client)
            execs = _execs(redis_client)
            plain.ack()
            # One transaction removed all three entries.
            assert _execs(redis_client) == execs + 1
            assert not {m.delivery_tag for m in taken} & _unacked(redis_client)


def _flushers() -> list[threading.Thread]:
    # Only live ones: an earlier test's flusher may still be listed for a moment as it ends.
    return [t for t in threading.enumerate() if t.name == "agentfleet-acks" and t.is_alive()]


def test_the_flusher_starts_with_the_first_waiting_ack_and_ends_with_its_channel(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    before = _flushers()
    queue = own_queue(key_prefix)
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": 0}], headers=FLEET_ITEM)
        consumer, taken = take(conn, queue, prefetch=1, count=1)
        with consumer:
            assert [t for t in _flushers() if t not in before] == []  # nothing waited yet
            taken[0].ack()
            started = [t for t in _flushers() if t not in before]
            assert len(started) == 1
    started[0].join(timeout=5)
    assert not started[0].is_alive()


def test_under_an_event_loop_the_loops_timer_sends_waiting_acks_and_no_flusher_starts(
    redis_url: str, key_prefix: str, redis_client: redis.Redis
) -> None:
    before = _flushers()
    queue = own_queue(key_prefix)
    hub = Hub()
    try:
        with Connection(redis_url, transport=RedisTransport) as conn:
            publish(conn, queue, [{"n": 0}], headers=FLEET_ITEM)
            consumer, taken = take(conn, queue, prefetch=1, count=1)
            with consumer:
                conn.register_with_event_loop(hub)
                taken[0].ack()
                assert _flushers() == before
                deadline = time.monotonic() + 5
                while taken[0].delivery_tag in _unacked(redis_client):
                    assert time.monotonic() < deadline, "the timer never sent it"
                    hub.run_once()
    finally:
        hub.close()
