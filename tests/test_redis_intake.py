"""Taking a window of messages at once: one script call after a ``BRPOP``, each message recorded
as unacknowledged in the same step, in kombu's own record format and in the order kombu's own
looks take them (priority across every queue consumed, queues of one priority in turn).

Against a real Redis with kombu connections (ours and kombu's stock Redis transport).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue
from kombu_support import drain_until, own_queue, publish, read_with_stock_kombu, take

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
    origins, taken = take(keys=[*lists, index, unacked], args=[2, 1000.5, 1, 1, 1])
    assert [json.loads(raw)["body"] for raw in taken] == ["0", "1"] and origins == [1, 1]
    assert redis_client.llen(lists[0]) == 1
    assert redis_client.zrange(index, 0, -1, withscores=True) == [("t0", 1000.5), ("t1", 1000.5)]
    assert json.loads(redis_client.hget(unacked, "t1")) == [json.loads(messages[1]), "x", "k"]


def test_a_take_of_more_than_a_hundred_records_every_one_in_a_few_commands(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    take = TRANSPORT_LUA.register(redis_client, "take")["take"]
    lists, index, unacked = [f"{key_prefix}.q"], f"{key_prefix}.index", f"{key_prefix}.unacked"
    messages = [
        json.dumps({"body": str(n), "properties": {"delivery_tag": f"t{n}", "delivery_info": {
            "exchange": "x", "routing_key": "k"}}})
        for n in range(250)
    ]  # fmt: skip
    redis_client.lpush(lists[0], *messages)
    before = redis_client.info("commandstats").get("cmdstat_zadd", {}).get("calls", 0)
    _, taken = take(keys=[*lists, index, unacked], args=[240, 1000.5, 1, 1, 1])
    assert len(taken) == 240 and redis_client.llen(lists[0]) == 10
    assert redis_client.zcard(index) == redis_client.hlen(unacked) == 240
    assert json.loads(redis_client.hget(unacked, "t239")) == [json.loads(messages[239]), "x", "k"]
    # One ZADD (and one HSET) per 100 messages, not one per message.
    assert redis_client.info("commandstats")["cmdstat_zadd"]["calls"] - before < 10


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
        # A raw DEL (Python's JSON escapes it, another producer may not) is no control
        # character to Python's JSON: recorded like any message.
        json.dumps(
            {**good, "body": "a\x7fb", "properties": {**good["properties"], "delivery_tag": "t3"}}
        ).replace("\\u007f", "\x7f"),
    ]
    redis_client.lpush(lists[0], *entries)
    # Each in its place, those that cannot be recorded wrapped in a list of their own.
    origins, taken = take(keys=[*lists, index, unacked], args=[8, 1.0, 1, 1, 1])
    wrapped = [[entries[0]], [entries[1]], entries[2], *([entry] for entry in entries[3:7])]
    assert taken == [*wrapped, entries[7]]
    assert origins == [1] * 8
    assert "\x7f" in entries[7]
    assert "\x01" in control
    assert not redis_client.exists(lists[0])
    assert redis_client.zrange(index, 0, -1) == ["t1", "t3"]
    assert sorted(redis_client.hgetall(unacked)) == ["t1", "t3"]


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


def _consume(
    redis_url: str,
    transport: Any,
    queues: list[Queue],
    *,
    prefetch: int,
    count: int,
    no_ack: tuple[Queue, ...] = (),
) -> list[str]:
    """The payloads' ``m`` of the first ``count`` messages one channel consuming ``queues`` (and
    ``no_ack`` without acknowledgements) takes, in the order they came; all acknowledged."""
    got: list[Any] = []
    with Connection(redis_url, transport=transport) as conn:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=prefetch)
        with (
            conn.Consumer(queues, channel=channel, callbacks=[lambda body, message: got.append(message)]),
            conn.Consumer(list(no_ack), channel=channel, no_ack=True, callbacks=[lambda b, m: got.append(m)]),
        ):
            drain_until(conn, got, count)
            for message in got:
                if message.delivery_info.get("routing_key") not in {q.routing_key for q in no_ack}:
                    message.ack()
    return [m.payload["m"] for m in got]


def _fill(redis_url: str, messages: list[tuple[Queue, str, int]]) -> None:
    """Publish each (queue, name, kombu priority) in turn: 0 is served first, 9 last."""
    with Connection(redis_url) as conn, conn.Producer() as producer:
        for queue, name, priority in messages:
            producer.publish(
                {"m": name}, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue],
                priority=priority,
            )  # fmt: skip


def _queue(key_prefix: str, name: str) -> Queue:
    exchange = Exchange(f"{key_prefix}.x", type="direct")
    return Queue(f"{key_prefix}.{name}", exchange, routing_key=name, queue_arguments={"x-max-priority": 9})


def test_a_consumer_without_a_prefetch_limit_gets_one_message_per_look(
    redis_url: str, queue: Queue, redis_client: redis.Redis
) -> None:
    with Connection(redis_url, transport=RedisTransport) as conn:
        publish(conn, queue, [{"n": n} for n in range(3)])
        got: list[Any] = []
        with conn.Consumer(queue, callbacks=[lambda body, message: got.append(message)]):
            for looks in range(1, 4):
                conn.drain_events(timeout=5)
                assert len(got) == looks
            for message in got:
                message.ack()
    assert [m.payload["n"] for m in got] == [0, 1, 2]


def test_a_higher_priority_message_of_another_queue_comes_before_a_lower_one_of_the_same(
    redis_url: str, key_prefix: str
) -> None:
    a, b = _queue(key_prefix, "a"), _queue(key_prefix, "b")
    backlog = [(a, "a-high", 0), (a, "a-low", 9), (a, "a-low", 9), (b, "b-mid", 4), (b, "b-mid", 4)]
    orders = []
    for transport in (None, RedisTransport):
        _fill(redis_url, backlog)
        orders.append(_consume(redis_url, transport, [a, b], prefetch=3, count=3))
        # What the window had no room for waits for the next test: read it away.
        _consume(redis_url, None, [a, b], prefetch=2, count=2)
    assert orders[0] == ["a-high", "b-mid", "b-mid"]
    assert orders[1] == orders[0]


def test_queues_of_one_priority_take_turns_as_with_kombus_own_transport(
    redis_url: str, key_prefix: str
) -> None:
    a, b, c = (_queue(key_prefix, name) for name in "abc")
    backlog = [(q, f"{q.routing_key}{n}", 0) for n in range(3) for q in (a, a, b, c)]
    orders = []
    for transport in (None, RedisTransport):
        _fill(redis_url, backlog)
        orders.append(_consume(redis_url, transport, [a, b, c], prefetch=12, count=12))
    assert orders[0][:6] == ["a0", "b0", "c0", "a0", "b1", "c1"]
    assert orders[1] == orders[0]


def test_taking_stops_before_a_message_of_a_queue_consumed_without_acknowledgements(
    redis_url: str, key_prefix: str
) -> None:
    a, b = _queue(key_prefix, "a"), _queue(key_prefix, "b")
    backlog = [(a, "a-high", 0), (a, "a-low", 9), (a, "a-low", 9), (b, "b-mid", 4)]
    orders = []
    for transport in (None, RedisTransport):
        _fill(redis_url, backlog)
        orders.append(_consume(redis_url, transport, [a], prefetch=4, count=4, no_ack=(b,)))
    assert orders[0] == ["a-high", "b-mid", "a-low", "a-low"]
    assert orders[1] == orders[0]


@pytest.mark.parametrize("holder", [1, 2], ids=["the likely queue", "another queue"])
def test_the_script_finds_a_lone_lists_messages_whichever_queue_holds_them(
    redis_client: redis.Redis, key_prefix: str, holder: int
) -> None:
    take = TRANSPORT_LUA.register(redis_client, "take")["take"]
    steps = ["", "\x06\x163", "\x06\x166", "\x06\x169"]
    lists = [f"{key_prefix}.{q}{step}" for q in ("a", "b") for step in steps]
    index, unacked = f"{key_prefix}.index", f"{key_prefix}.unacked"
    messages = [
        json.dumps({"body": str(n), "properties": {"delivery_tag": f"t{n}", "delivery_info": {
            "exchange": "x", "routing_key": "k"}}})
        for n in range(3)
    ]  # fmt: skip
    redis_client.lpush(lists[(holder - 1) * 4 + 2], *messages)  # one list of one queue, step 6
    # The BRPOP answered queue 1 (the likely one).
    origins, taken = take(keys=[*lists, index, unacked], args=[5, 1.0, 1, 1, 1, 1])
    assert [json.loads(raw)["body"] for raw in taken] == ["0", "1", "2"]
    assert origins == [holder] * 3
    assert redis_client.hlen(unacked) == 3
