"""The reconciler's judgement against a real Redis, without workers: what it sends again and when.

Messages are published to queues no worker reads, so what the reconciler sends stays there to
be counted.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from stranded import TAKEN_AGO_S, reconciling_settings

from agentfleet.config import Settings, load_settings
from agentfleet.embedded_redis import free_port
from agentfleet.errors import BrokerUnavailable
from agentfleet.models import TaskOutcome
from agentfleet.orchestration import Fleet
from agentfleet.runs import ClaimRenewer, RunStore
from agentfleet.tasks.reconciler import Reconciler
from agentfleet.tasks.runtime import runtime
from agentfleet.transport.broker_view import read_broker
from agentfleet.transport.layout import UNACKED, UNACKED_INDEX


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return reconciling_settings(redis_url, "rc")


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as made:
        yield made


def _reconciler(fleet: Fleet) -> Reconciler:
    return Reconciler(runtime(fleet.settings), fleet.app, node="test")


def _messages(client: redis.Redis, queue: str) -> list[dict]:
    return [json.loads(raw) for raw in client.lrange(queue, 0, -1)]


def _lose(client: redis.Redis, queue: str, count: int) -> list[dict]:
    """Pop ``count`` messages as a worker's BRPOP would, and drop them, as its death would."""
    return [json.loads(client.rpop(queue)) for _ in range(count)]


def test_an_item_whose_message_vanished_is_sent_again_after_the_grace_period(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    queue = fleet.settings.queues.agents
    run = fleet.map("t.echo", [{"n": i} for i in range(3)])
    lost = _lose(redis_client, queue, 1)[0]["headers"]["id"]
    reconciler = _reconciler(fleet)
    now = time.time()
    first = reconciler.pass_once(now=now)
    assert first.acted and first.recovered == []
    assert reconciler.pass_once(now=now + 2).recovered == []
    assert reconciler.pass_once(now=now + 6).recovered == [lost]
    ids = [m["headers"]["id"] for m in _messages(redis_client, queue)]
    assert sorted(ids) == sorted(f"{run.id}-{i}" for i in range(3))
    assert run.summary().recovered == 1


def test_the_message_sent_again_carries_the_input_and_the_idempotency_key(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    queue = fleet.settings.queues.agents
    run = fleet.map("t.echo", [{"n": 7}], key=lambda item: f"invoice-{item['n']}")
    original = _lose(redis_client, queue, 1)[0]
    reconciler = _reconciler(fleet)
    reconciler.pass_once(now=time.time())
    reconciler.pass_once(now=time.time() + 10)
    again = _messages(redis_client, queue)[0]
    assert again["headers"]["id"] == original["headers"]["id"] == f"{run.id}-0"
    body = json.loads(base64.b64decode(again["body"]))
    _, kwargs, _ = body
    assert kwargs["n"] == 7 and kwargs["_af"]["key"] == "invoice-7"


def test_an_item_with_a_live_claim_or_a_queued_message_is_left_alone(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    queue = fleet.settings.queues.agents
    run = fleet.map("t.echo", [{"n": i} for i in range(2)])
    _lose(redis_client, queue, 1)
    item = fleet.store.items(run.id)[0]
    fleet.store.begin(run.id, item[1], item[0], deliveries_ttl_s=60, token="w:1:x", claim_ttl_s=60)
    reconciler = _reconciler(fleet)
    for offset in (0, 10, 20):
        assert reconciler.pass_once(now=time.time() + offset).recovered == []
    assert redis_client.llen(queue) == 1


def test_an_item_seen_again_between_passes_is_no_longer_suspect(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    queue = fleet.settings.queues.agents
    fleet.map("t.echo", [{"n": 1}])
    raw = redis_client.rpop(queue)
    reconciler = _reconciler(fleet)
    now = time.time()
    reconciler.pass_once(now=now)
    redis_client.lpush(queue, raw)  # it was in flight, not lost
    reconciler.pass_once(now=now + 3)
    redis_client.rpop(queue)
    assert reconciler.pass_once(now=now + 6).recovered == []
    assert len(reconciler.pass_once(now=now + 12).recovered) == 1


def test_a_dead_workers_unacknowledged_copy_is_dropped_when_the_item_is_sent_again(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    queue = fleet.settings.queues.agents
    run = fleet.map("t.echo", [{"n": 1}])
    message = _lose(redis_client, queue, 1)[0]
    tag = f"tag-{uuid.uuid4().hex[:6]}"
    taken = time.time() - TAKEN_AGO_S
    redis_client.hset(UNACKED, tag, json.dumps([message, "", queue]))
    redis_client.zadd(UNACKED_INDEX, {tag: taken})
    try:
        reconciler = _reconciler(fleet)
        reconciler.pass_once(now=time.time())
        assert reconciler.pass_once(now=time.time() + 10).recovered == [f"{run.id}-0"]
        assert not redis_client.hexists(UNACKED, tag)
        assert redis_client.llen(queue) == 1
    finally:
        redis_client.hdel(UNACKED, tag)
        redis_client.zrem(UNACKED_INDEX, tag)


def test_unacknowledged_messages_with_a_countdown_ahead_or_just_taken_are_waiting(
    redis_client: redis.Redis,
) -> None:
    now = time.time()
    later = "2999-01-01T00:00:00+00:00"
    rows = {
        "a": ({"headers": {"id": "eta-ahead", "eta": later}}, now - TAKEN_AGO_S),
        "b": ({"headers": {"id": "just-taken"}}, now - 1),
        "c": ({"headers": {"id": "abandoned"}}, now - TAKEN_AGO_S),
    }
    prefix = uuid.uuid4().hex[:6]
    try:
        for tag, (message, at) in rows.items():
            redis_client.hset(UNACKED, prefix + tag, json.dumps([message, "", "q"]))
            redis_client.zadd(UNACKED_INDEX, {prefix + tag: at})
        view = read_broker(redis_client, [], grace_s=10, max_scan=1000, now=now)
    finally:
        for tag in rows:
            redis_client.hdel(UNACKED, prefix + tag)
            redis_client.zrem(UNACKED_INDEX, prefix + tag)
    assert {"eta-ahead", "just-taken"} <= view.waiting
    assert "abandoned" not in view.waiting
    assert view.stale["abandoned"] == [prefix + "c"]


def test_queues_longer_than_the_scan_limit_make_the_view_incomplete_and_nothing_is_sent(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    queue = fleet.settings.queues.agents
    fleet.map("t.echo", [{"n": i} for i in range(3)])
    _lose(redis_client, queue, 1)
    limited = fleet.settings.model_copy(
        update={"delivery": fleet.settings.delivery.model_copy(update={"reconcile_max_scan": 1})}
    )
    reconciler = Reconciler(runtime(limited), fleet.app, node="test")
    report = reconciler.pass_once(now=time.time())
    assert not report.complete
    assert reconciler.pass_once(now=time.time() + 60).recovered == []


def test_only_one_reconciler_acts_at_a_time_and_the_next_takes_over_when_it_stops(fleet: Fleet) -> None:
    first, second = _reconciler(fleet), _reconciler(fleet)
    assert first.pass_once().acted
    assert not second.pass_once().acted
    assert first.pass_once().acted
    first.release()
    assert second.pass_once().acted


def test_items_of_a_cancelled_run_get_their_cancelled_outcome(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    queue = fleet.settings.queues.agents
    run = fleet.map("t.echo", [{"n": 1}])
    _lose(redis_client, queue, 1)
    fleet.store.cancel(run.id)
    reconciler = _reconciler(fleet)
    reconciler.pass_once(now=time.time())
    assert reconciler.pass_once(now=time.time() + 10).cancelled == 1
    summary = run.summary()
    assert (summary.cancelled, summary.recovered) == (1, 0)
    assert run.id not in fleet.store.active_runs()


def test_a_run_that_ended_without_its_aggregate_gets_it_sent_again(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    run = fleet.map("t.echo", [{"n": 1}], aggregate="agentfleet.merge:concat")
    item = fleet.store.items(run.id)[0]
    fleet.store.finish(
        TaskOutcome(task_id=item[0], run_id=run.id, item_key=item[2], ok=True, idempotency_key=item[1])
    )
    reconciler = _reconciler(fleet)
    reconciler.pass_once(now=time.time())
    assert reconciler.pass_once(now=time.time() + 10).aggregates == 1
    ids = [m["headers"]["id"] for m in _messages(redis_client, fleet.settings.queues.fanin)]
    assert ids == [f"{run.id}-agg"]


def test_the_renewer_extends_held_claims_and_drops_lost_ones(
    settings: Settings, redis_client: redis.Redis
) -> None:
    store = RunStore(redis_client, prefix=settings.key_prefix)
    redis_client.set(store.claim_key("a"), "w:1:a", px=2000)
    redis_client.set(store.claim_key("b"), "w:9:other", px=2000)
    renewer = ClaimRenewer()
    renewer.hold(store, "a", "w:1:a", 60)
    renewer.hold(store, "b", "w:1:b", 60)
    try:
        renewer.renew_now()
        assert redis_client.pttl(store.claim_key("a")) > 2000
        assert redis_client.pttl(store.claim_key("b")) <= 2000
        assert renewer.held() == 1
    finally:
        renewer.drop(store, "a")
        renewer.drop(store, "b")


def test_messages_a_broker_outage_kept_from_being_published_are_published_by_the_reconciler(
    settings: Settings, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Chunks of two: the first chunk goes out, the broker then refuses the second.
    quick = settings.model_copy(
        update={
            "delivery": settings.delivery.model_copy(update={"client_outage_s": 0.3}),
            "dispatch": settings.dispatch.model_copy(update={"chunk_items": 2}),
        }
    )
    with Fleet(quick) as fleet:
        push = fleet.broker.lpush
        pushes: list[int] = []

        def flaky(*args: object) -> object:
            if pushes:
                raise redis.ConnectionError("connection refused")
            pushes.append(len(args) - 1)
            return push(*args)

        monkeypatch.setattr(fleet.broker, "lpush", flaky)
        run = fleet.map("t.echo", [{"n": i} for i in range(4)])
        monkeypatch.setattr(fleet.broker, "lpush", push)
        queue = fleet.settings.queues.agents
        assert redis_client.llen(queue) == 2
        reconciler = _reconciler(fleet)
        reconciler.pass_once(now=time.time())
        assert len(reconciler.pass_once(now=time.time() + 10).recovered) == 2
        ids = sorted(m["headers"]["id"] for m in _messages(redis_client, queue))
    assert ids == sorted(f"{run.id}-{i}" for i in range(4))


def test_a_fleet_whose_broker_stays_down_raises_one_error_naming_it_masked() -> None:
    url = f"redis://:hunter2secret@127.0.0.1:{free_port()}/0"
    settings = load_settings(broker_url=url, delivery={"client_outage_s": 0.5})
    with Fleet(settings) as fleet, pytest.raises(BrokerUnavailable) as caught:
        fleet.map("t.echo", [{"n": 1}])
    assert "hunter2secret" not in str(caught.value)
    assert f"redis://:***@127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}/0" in str(caught.value)
