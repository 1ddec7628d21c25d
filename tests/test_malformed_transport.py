"""The transport's two reads take malformed entries out of the queue and go on: the first
message of a look (``BRPOP``) and the rest of the window (``take.lua``). Each entry goes to
the receiver as it was found, its record (if any) is forgotten, and the messages taken with it
are delivered in their order.

Against a real Redis with kombu connections on agentfleet's transport (no Celery here: the
worker-level behaviour is ``test_malformed_workers.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Queue
from kombu_support import own_queue, publish, take
from malformed_support import encoded, envelope, push

from agentfleet.transport import malformed
from agentfleet.transport.broker_view import read_broker
from agentfleet.transport.malformed import MalformedEntry
from agentfleet.transport.redis_channel import RedisTransport


@pytest.fixture
def queue(key_prefix: str) -> Queue:
    return own_queue(key_prefix)


@pytest.fixture
def received() -> Iterator[list[MalformedEntry]]:
    found: list[MalformedEntry] = []
    malformed.install(found.append)
    yield found
    malformed.uninstall()


def _unacked_tags(client: redis.Redis, queue: Queue) -> set[str]:
    """The delivery tags recorded unacknowledged for ``queue``'s exchange (kombu's ``unacked``
    hash is shared by everything on this Redis, other tests' workers included)."""
    records = client.hgetall("unacked")
    return {tag for tag, record in records.items() if json.loads(record)[1] == queue.exchange.name}


def _good_tags(taken: list[Any]) -> set[str]:
    return {message.delivery_tag for message in taken}


def test_a_first_entry_that_is_not_json_goes_to_the_receiver_and_the_look_goes_on(
    redis_url: str, queue: Queue, redis_client: redis.Redis, received: list[MalformedEntry]
) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": 0}])  # declares the queue
        raw_client = redis.Redis.from_url(redis_url)
        raw_client.delete(queue.name)
        push(raw_client, queue.name, b"\xff not JSON")
        publish(conn, queue, [{"n": 1}, {"n": 2}])
        consumer, taken = take(conn, queue, prefetch=3, count=2)
        with consumer:
            assert [m.payload["n"] for m in taken] == [1, 2]
            (entry,) = received
            assert entry.raw == b"\xff not JSON" and entry.queue == queue.name
            assert entry.reason.startswith("not JSON")
            assert _unacked_tags(redis_client, queue) >= _good_tags(taken)
            for message in taken:
                message.ack()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"[1, 2]", "JSON that is not an object (a list)"),
        (
            json.dumps({"properties": {"__type__": "datetime", "__value__": "?"}}).encode(),
            "kombu cannot read",
        ),
        (json.dumps({"properties": {"delivery_info": {}}}).encode(), "delivery_tag is missing"),
    ],
    ids=["a list", "a kombu type marker", "no delivery tag"],
)
def test_each_first_entry_kombu_cannot_read_goes_to_the_receiver(
    redis_url: str,
    queue: Queue,
    redis_client: redis.Redis,
    received: list[MalformedEntry],
    raw: bytes,
    reason: str,
) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": 0}])
        redis_client.delete(queue.name)
        push(redis_client, queue.name, raw)
        publish(conn, queue, [{"n": 1}])
        consumer, taken = take(conn, queue, prefetch=1, count=1)
        with consumer:
            assert [m.payload["n"] for m in taken] == [1]
            assert [(e.raw, reason in e.reason) for e in received] == [(raw, True)]
            taken[0].ack()


def test_malformed_entries_in_the_window_go_to_the_receiver_and_the_rest_come_in_order(
    redis_url: str, queue: Queue, redis_client: redis.Redis, received: list[MalformedEntry]
) -> None:
    recorded_but_broken = {
        "body": "!!! not base64",
        "properties": {
            "delivery_tag": "broken-body",
            "body_encoding": "base64",
            "delivery_info": {"exchange": queue.exchange.name, "routing_key": "k"},
        },
    }
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": 0}])
        push(redis_client, queue.name, "[1]")
        publish(conn, queue, [{"n": 1}])
        push(redis_client, queue.name, json.dumps({"properties": {}}), json.dumps(recorded_but_broken))
        publish(conn, queue, [{"n": 2}])
        brpops = int(redis_client.info("commandstats").get("cmdstat_brpop", {}).get("calls", 0))
        consumer, taken = take(conn, queue, prefetch=6, count=3)
        with consumer:
            # One look: the BRPOP brought the first, one script call the rest.
            assert int(redis_client.info("commandstats")["cmdstat_brpop"]["calls"]) - brpops == 1
            assert [m.payload["n"] for m in taken] == [0, 1, 2]
            reasons = [e.reason for e in received]
            assert len(reasons) == 3
            assert (
                "a list" in reasons[0]
                and "delivery_tag is missing" in reasons[1]
                and "not valid base64" in reasons[2]
            )
            assert all(e.queue == queue.name for e in received)
            taken[0].channel.qos.flush()  # the forgotten record rides with the acknowledgements
            # Only the good messages are recorded: the broken one's record was forgotten.
            assert _unacked_tags(redis_client, queue) == _good_tags(taken)
            assert redis_client.llen(queue.name) == 0
            for message in taken:
                message.ack()
            taken[0].channel.qos.flush()
    assert not _unacked_tags(redis_client, queue) & _good_tags(taken)


def test_a_message_the_consumer_cannot_take_is_taken_out_and_acknowledged(
    redis_url: str, queue: Queue, redis_client: redis.Redis, received: list[MalformedEntry]
) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(4)])
        channel = conn.channel()
        channel.basic_qos(prefetch_count=4)
        taken: list[Any] = []

        def on_message(body: Any, message: Any) -> None:
            if body["n"] == 1:
                raise ValueError("this consumer cannot take n=1")
            taken.append(message)

        with conn.Consumer(queue, channel=channel, callbacks=[on_message]):
            while len(taken) < 3:
                conn.drain_events(timeout=5)
            assert [m.payload["n"] for m in taken] == [0, 2, 3]
            (entry,) = received
            assert json.loads(entry.raw)["properties"]["delivery_tag"] not in _good_tags(taken)
            assert "ValueError: this consumer cannot take n=1" in entry.reason
            channel.qos.flush()
            assert _unacked_tags(redis_client, queue) == _good_tags(taken)
            for message in taken:
                message.ack()


def test_the_reconcilers_view_reads_a_queue_and_records_holding_bytes_that_are_not_text(
    redis_url: str, key_prefix: str
) -> None:
    # The reconciler's client decodes replies; one entry that is not UTF-8 used to fail its pass.
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    raw_client = redis.Redis.from_url(redis_url)
    queue = f"{key_prefix}.q"
    message = envelope("fleet_test_tasks.echo", queue=queue)
    push(raw_client, queue, b"\xff\xfe not text", encoded(message))
    taken = envelope("fleet_test_tasks.echo", queue=queue)
    record = b"[" + encoded(taken)[:-2] + b', "x": "\xff"}}, "", "' + queue.encode() + b'"]'
    tag = f"{key_prefix}-tag"
    raw_client.hset("unacked", tag, record)
    raw_client.zadd("unacked_index", {tag: time.time()})
    try:
        view = read_broker(client, [queue], grace_s=30, max_scan=1000, now=time.time())
    finally:
        # Nothing that is not text stays behind on the shared Redis.
        raw_client.delete(queue)
        raw_client.hdel("unacked", tag)
        raw_client.zrem("unacked_index", tag)
    assert view.complete
    assert {message["headers"]["id"], taken["headers"]["id"]} <= view.waiting


def test_a_record_kombu_cannot_read_back_is_dropped_and_handed_over_not_restored_forever(
    redis_url: str, queue: Queue, redis_client: redis.Redis, received: list[MalformedEntry]
) -> None:
    # What a worker killed between taking a malformed entry and taking it out leaves behind:
    # kombu's restore (at the visibility timeout, or at close) raised on it every time.
    tag = f"{queue.name}-unreadable"
    entry = {"properties": {"delivery_tag": tag, "x": {"__type__": "datetime", "__value__": "?"}}}
    redis_client.hset("unacked", tag, json.dumps([entry, queue.exchange.name, "k"]))
    redis_client.zadd("unacked_index", {tag: 1.0})
    with Connection(redis_url, transport=RedisTransport) as conn:
        conn.channel().qos.restore_by_tag(tag)
    assert not redis_client.hexists("unacked", tag) and redis_client.zscore("unacked_index", tag) is None
    (found,) = received
    assert "could not be read back" in found.reason and tag.encode() in found.raw
