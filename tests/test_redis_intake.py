"""Taking a window of messages at once: one script call after a ``BRPOP``, each message recorded
as unacknowledged in the same step, in kombu's own record format and queue order.

Against a real Redis with kombu connections (ours and kombu's stock Redis transport).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from kombu import Connection, Queue
from kombu_support import own_queue, publish, read_with_stock_kombu, take

from agentfleet.transport.intake import TRANSPORT_LUA
from agentfleet.transport.redis_channel import RedisTransport


@pytest.fixture
def queue(key_prefix: str) -> Queue:
    return own_queue(key_prefix, queue_arguments={"x-max-priority": 9})


def _brpops(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_brpop", {}).get("calls", 0))


def _unacked(client: redis.Redis) -> dict[str, Any]:
    return {tag: json.loads(raw) for tag, raw in client.hgetall("unacked").items()}


def test_one_look_takes_the_windows_room_in_order_each_recorded(
    redis_url: str, queue: Queue, redis_client: redis.Redis
) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(10)])
        brpops = _brpops(redis_client)
        consumer, taken = take(conn, queue, prefetch=5, count=5)
        with consumer:
            # One BRPOP brought the first; one script call the other four.
            assert _brpops(redis_client) - brpops == 1
            assert [m.payload["n"] for m in taken] == [0, 1, 2, 3, 4]
            records = _unacked(redis_client)
            for message in taken:
                # kombu's record: [the message as published, exchange, routing key].
                assert records[message.delivery_tag] == [message._raw, queue.exchange.name, "k"]
            assert redis_client.llen(queue.name) == 5
            for message in taken:
                message.ack()
    assert not {m.delivery_tag for m in taken} & set(_unacked(redis_client))


def test_messages_come_in_the_order_kombus_own_transport_gives(
    redis_url: str, queue: Queue, redis_client: redis.Redis
) -> None:
    mixed = [({"n": n}, {"priority": n % 3 * 4}) for n in range(12)]
    orders = []
    for transport in (None, RedisTransport):
        with Connection(redis_url, transport=transport) as conn:
            for payload, options in mixed:
                publish(conn, queue, [payload], **options)
            consumer, taken = take(conn, queue, prefetch=12, count=12)
            with consumer:
                orders.append([m.payload["n"] for m in taken])
                for message in taken:
                    message.ack()
    assert orders[1] == orders[0] and len(orders[0]) == 12


def test_messages_taken_and_not_finished_go_back_for_any_consumer(
    redis_url: str, queue: Queue, redis_client: redis.Redis
) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(3)])
        consumer, taken = take(conn, queue, prefetch=3, count=3)
        consumer.cancel()
    # The connection closed with three messages unfinished: kombu put them back from the records.
    assert not {m.delivery_tag for m in taken} & set(_unacked(redis_client))
    assert sorted(p["n"] for p in read_with_stock_kombu(redis_url, queue, 3)) == [0, 1, 2]


def test_the_script_moves_messages_from_the_queue_to_the_record_in_one_step(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    take = TRANSPORT_LUA.register(redis_client, "take")["take"]
    lists, index, unacked = [f"{key_prefix}.q"], f"{key_prefix}.index", f"{key_prefix}.unacked"
    messages = [
        json.dumps({"body": str(n), "properties": {"delivery_tag": f"t{n}", "delivery_info": {
            "exchange": "x", "routing_key": "k"}}})
        for n in range(3)
    ]  # fmt: skip
    redis_client.lpush(lists[0], *messages)
    taken = take(keys=[*lists, index, unacked], args=[2, 1000.5])
    assert [json.loads(raw)["body"] for raw in taken] == ["0", "1"]
    assert redis_client.llen(lists[0]) == 1
    assert redis_client.zrange(index, 0, -1, withscores=True) == [("t0", 1000.5), ("t1", 1000.5)]
    assert json.loads(redis_client.hget(unacked, "t1")) == [json.loads(messages[1]), "x", "k"]


def test_an_entry_without_a_delivery_tag_or_info_is_taken_unrecorded_and_handed_back_apart(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    take = TRANSPORT_LUA.register(redis_client, "take")["take"]
    lists, index, unacked = [f"{key_prefix}.q"], f"{key_prefix}.index", f"{key_prefix}.unacked"
    no_info = {"properties": {"delivery_tag": "t2", "delivery_info": {"exchange": "x"}}}
    good = {
        "body": "1",
        "properties": {"delivery_tag": "t1", "delivery_info": {"exchange": "x", "routing_key": "k"}},
    }
    # A control character in a string: cjson reads it, Python's JSON (and kombu) would not.
    control = json.dumps({**good, "body": "a\x01b"}).replace("\\u0001", "\x01")
    entries = [
        "not json",
        json.dumps({"properties": {}}),
        json.dumps(good),
        json.dumps(no_info),
        "[1]",
        control,
        # A tag that is not ASCII: Python reads it otherwise, and would never find its record.
        json.dumps({**good, "properties": {**good["properties"], "delivery_tag": "t\u00e9"}}),
    ]
    redis_client.lpush(lists[0], *entries)
    # Each in its place, those that cannot be recorded wrapped in a list of their own.
    taken = take(keys=[*lists, index, unacked], args=[7, 1.0])
    assert taken == [[entries[0]], [entries[1]], entries[2], *([entry] for entry in entries[3:])]
    assert "\x01" in control
    assert not redis_client.exists(lists[0])
    assert redis_client.zrange(index, 0, -1) == ["t1"]
    assert list(redis_client.hgetall(unacked)) == ["t1"]


def test_a_consumer_that_never_acknowledges_gets_one_message_per_look_and_no_record(
    redis_url: str, queue: Queue, redis_client: redis.Redis
) -> None:
    # Celery's control replies: kombu's Mailbox counts looks to know when it has them all.
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(3)])
        got: list[Any] = []
        with conn.Consumer(queue, no_ack=True, callbacks=[lambda body, message: got.append(body)]):
            for looks in range(1, 4):
                conn.drain_events(timeout=5)
                assert len(got) == looks
        assert sorted(m["n"] for m in got) == [0, 1, 2]
    assert all(record[1] != queue.exchange.name for record in _unacked(redis_client).values())


def test_messages_taken_but_not_handed_over_go_back_to_the_front_of_their_queue(
    redis_url: str, queue: Queue, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(6)])
        transport = conn.transport
        real, handed = transport._deliver, []

        def deliver(message: Any, to: str) -> None:
            if len(handed) == 2:
                raise redis.ConnectionError("the connection broke on the third message")
            handed.append(message)
            real(message, to)

        monkeypatch.setattr(transport, "_deliver", deliver)
        with pytest.raises(redis.ConnectionError):
            take(conn, queue, prefetch=6, count=6)
        monkeypatch.setattr(transport, "_deliver", real)
        # The first two were handed over; the other four are back in their queue and out of
        # the unacknowledged record.
        back = [
            json.loads(raw)["properties"]["delivery_tag"] for raw in redis_client.lrange(queue.name, 0, -1)
        ]
        recorded = set(_unacked(redis_client))
        assert len(back) == 4 and not set(back) & recorded
        assert {m["properties"]["delivery_tag"] for m in handed} <= recorded
    # Closing gave back the two handed over but never finished, at the front as kombu does
    # (the last first); then the four, in their order.
    payloads = read_with_stock_kombu(redis_url, queue, 6)
    assert [p["n"] for p in payloads] == [1, 0, 2, 3, 4, 5]
