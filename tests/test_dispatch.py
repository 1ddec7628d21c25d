"""Dispatch: any iterable, recorded and sent a chunk at a time, waiting while the queue is full.

Against a real Redis and no workers (so dispatch is told not to require them): messages stay in
the queue to be read.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from agentfleet.config import Settings, load_settings
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.dispatch import DispatchProgress
from agentfleet.protocol.messages import item_signature
from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.runs.dispatching import DispatchRecord
from agentfleet.tasks.reconciler import Reconciler
from agentfleet.tasks.runtime import runtime
from agentfleet.transport.stamping import MessageTemplate, new_delivery_tag

CHUNK = 50


@pytest.fixture
def settings(redis_url: str) -> Settings:
    tag = uuid.uuid4().hex[:8]
    return load_settings(
        broker_url=redis_url,
        key_prefix=f"dp{tag}",
        queues={"agents": f"dp{tag}.agents", "fanin": f"dp{tag}.fanin", "maintenance": f"dp{tag}.m"},
        dispatch={"chunk_items": CHUNK, "small_run_items": 0, "require_workers": False},
    )


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as made:
        yield made


def _messages(client: redis.Redis, fleet: Fleet) -> list[dict]:
    """Every waiting message of the agents queue (any priority list), oldest first."""
    lists = [k for k in client.keys(f"{fleet.settings.queues.agents}*")]
    return [json.loads(raw) for key in lists for raw in reversed(client.lrange(key, 0, -1))]


def _body(message: dict) -> list:
    return json.loads(base64.b64decode(message["body"]))


def test_a_generator_is_recorded_and_sent_in_order(fleet: Fleet, redis_client: redis.Redis) -> None:
    count = CHUNK * 3 + 7
    run = fleet.map("t.echo", ({"n": n} for n in range(count)))
    assert run.total == count
    record = fleet.store.get_run(run.id)
    assert record["tasks_total"] == str(count) and "dispatching" not in record
    messages = _messages(redis_client, fleet)
    assert [m["headers"]["id"] for m in messages] == [f"{run.id}-{n}" for n in range(count)]
    args, kwargs, _ = _body(messages[17])
    assert args == [] and kwargs["n"] == 17
    assert kwargs[META_KWARG]["key"] == fleet.store.items(run.id, [17])[17][1]


def test_a_stamped_message_is_the_message_celery_would_send(fleet: Fleet, redis_client: redis.Redis) -> None:
    meta = ItemMeta(run="0123456789abcdef", idx=3, key="k3", item="3")
    queue = fleet.settings.queues.agents

    def signature(m: ItemMeta) -> object:
        return item_signature(
            fleet.app,
            names=["t.echo"],
            queues=[queue],
            meta=m,
            inputs={"n": m.idx},
            priority=5,
            redactor=fleet.settings.redactor(),
        )

    template = MessageTemplate.from_signature(fleet.app, signature(meta.model_copy(update={"idx": 0})))
    assert redis_client.llen(template.key) == 0, "the probe is never sent"
    with fleet.app.producer_or_acquire() as producer:
        signature(meta).apply_async(producer=producer)
    sent = json.loads(redis_client.lpop(template.key))
    kwargs = json.dumps({"n": 3, META_KWARG: meta.to_kwarg()})
    stamped = json.loads(
        template.build(meta.task_id, kwargs, sent["headers"]["kwargsrepr"], new_delivery_tag)
    )
    for message in (sent, stamped):
        message["properties"].pop("delivery_tag")
        message["body"] = _body(message)
    # Celery's copies of the shown arguments among the properties are left out; the headers,
    # which workers read, hold them.
    assert {sent["properties"].pop(name) for name in ("argsrepr", "kwargsrepr")} == {
        stamped["headers"]["argsrepr"],
        stamped["headers"]["kwargsrepr"],
    }
    assert stamped == sent


def test_a_mistake_in_the_first_chunk_leaves_no_run(fleet: Fleet) -> None:
    with pytest.raises(DispatchError, match="input 3 is str"):
        fleet.map("t.echo", [{"n": 0}, {"n": 1}, {"n": 2}, "four"])
    assert fleet.store.active_runs() == [] and fleet.runs() == []


def test_a_mistake_further_on_cancels_the_run_and_says_how_far_it_got(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    inputs = [*({"n": n} for n in range(CHUNK)), {"n": CHUNK, META_KWARG: 1}]
    with pytest.raises(DispatchError, match=f"stopped after {CHUNK} items were sent, and is cancelled"):
        fleet.map("t.echo", inputs)
    (summary,) = fleet.runs(limit=1)
    assert summary.tasks_total == CHUNK and summary.status == "cancelled"


def test_the_dispatch_waits_while_the_queue_is_full(settings: Settings, redis_client: redis.Redis) -> None:
    full = settings.model_copy(
        update={
            "dispatch": settings.dispatch.model_copy(
                update={"max_queued": CHUNK, "backpressure_poll_s": 0.05}
            )
        }
    )
    seen: list[DispatchProgress] = []
    with Fleet(full) as fleet:
        done = threading.Event()
        worker = threading.Thread(
            target=lambda: (
                fleet.map("t.echo", [{"n": n} for n in range(CHUNK * 3)], progress=seen.append),
                done.set(),
            )
        )
        worker.start()
        deadline = time.monotonic() + 10
        while not any(p.waiting for p in seen) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert any(p.waiting for p in seen), "it waits with two chunks queued"
        assert not done.is_set() and len(_messages(redis_client, fleet)) == CHUNK * 2
        for key in redis_client.keys(f"{full.queues.agents}*"):
            redis_client.delete(key)  # the workers caught up
        worker.join(timeout=10)
        assert done.is_set()
    assert seen[-1].sent == CHUNK * 3 and not seen[-1].waiting


def test_an_empty_run_with_an_aggregate_still_fans_in(fleet: Fleet, redis_client: redis.Redis) -> None:
    run = fleet.map("t.echo", iter([]), aggregate="agentfleet.merge:concat")
    assert run.total == 0
    (message,) = [json.loads(raw) for raw in redis_client.lrange(fleet.settings.queues.fanin, 0, -1)]
    assert message["headers"]["task"] == "agentfleet.aggregate"


def test_the_reconciler_leaves_what_is_not_sent_yet_and_takes_over_a_dead_dispatch(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    record = DispatchRecord(fleet.store)
    run_id = uuid.uuid4().hex[:16]
    record.open(
        run_id,
        name="n",
        kind="map",
        task="t.echo",
        queues=[fleet.settings.queues.agents],
        aggregate=None,
        fail_fast=False,
        max_in_flight=None,
        extra={},
        promise_s=30,
    )
    rows = [(f"{run_id}-{i}", f"{run_id}:{i}:ab", str(i)) for i in range(4)]
    record.append(run_id, 0, rows, [json.dumps({"n": i}) for i in range(4)], sent=0, promise_s=30)
    reconciler = Reconciler(runtime(fleet.settings), fleet.app, node="test")
    now = time.time()
    reconciler.pass_once(now=now)
    assert reconciler.pass_once(now=now + 20).recovered == [], "recorded, not sent yet: not lost"
    assert run_id in fleet.store.active_runs()
    reconciler.pass_once(now=now + 40)  # the promise has passed: the dispatcher is gone
    assert "dispatching" not in fleet.store.get_run(run_id)
    assert sorted(reconciler.pass_once(now=now + 60).recovered) == sorted(r[0] for r in rows)
