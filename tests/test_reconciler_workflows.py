"""The reconciler and the newer shapes of work, against a real Redis and no workers: graph
steps, batches and compensations whose messages were lost are sent again, and no sooner.

Messages go to queues no worker reads, so what the reconciler sends stays there to be counted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis
from stranded import reconciling_settings

from agentfleet import Node
from agentfleet.config import Settings
from agentfleet.idempotency import node_key
from agentfleet.models import TaskOutcome
from agentfleet.orchestration import Fleet, Run
from agentfleet.runs import GraphState
from agentfleet.tasks.graph import spec_of
from agentfleet.tasks.reconciler import Reconciler
from agentfleet.tasks.runtime import runtime

GRAPH = [Node("a", "t.a"), Node("b", "t.b", after=["a"])]


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return reconciling_settings(redis_url, "rw")


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as made:
        yield made


def _ids(client: redis.Redis, queue: str) -> list[str]:
    return [json.loads(raw)["headers"]["id"] for raw in client.lrange(queue, 0, -1)]


def _two_passes(fleet: Fleet) -> list[str]:
    """What a reconciler sends again: one pass marks suspects, the next, past the grace, acts."""
    reconciler = Reconciler(runtime(fleet.settings), fleet.app, node="test")
    now = time.time()
    assert reconciler.pass_once(now=now).acted
    return reconciler.pass_once(now=now + 10).recovered


def _step_done(fleet: Fleet, run: Run, idx: int, step: str) -> None:
    """Record a step's success as a worker would, up to the point of sending what it released."""
    _, key, item = fleet.store.items(run.id)[idx]
    fleet.store.finish(
        TaskOutcome(
            task_id=f"{run.id}-{idx}-n-{step}",
            run_id=run.id,
            item_key=item,
            ok=True,
            result={"step": step},
            index=idx,
            idempotency_key=node_key(key, step),
        ),
        record=False,
    )
    GraphState(fleet.store).advance(
        run.id,
        key,
        spec_of(fleet.store, run.id),
        step,
        ok=True,
        cost_usd=0.0,
        duration_s=0.1,
        attempts=1,
        index=idx,
    )


def test_a_graph_step_whose_message_vanished_is_sent_again(fleet: Fleet, redis_client: redis.Redis) -> None:
    queue = fleet.settings.queues.agents
    run = fleet.graph(GRAPH, [{"n": 1}, {"n": 2}])
    lost = json.loads(redis_client.rpop(queue))["headers"]["id"]
    assert _two_passes(fleet) == [lost.rsplit("-n-", 1)[0]]
    assert sorted(_ids(redis_client, queue)) == [f"{run.id}-0-n-a", f"{run.id}-1-n-a"]


def test_a_released_step_that_was_never_sent_is_sent(fleet: Fleet, redis_client: redis.Redis) -> None:
    queue = fleet.settings.queues.agents
    run = fleet.graph(GRAPH, [{"n": 1}])
    redis_client.delete(queue)  # step a's message was taken ...
    _step_done(fleet, run, 0, "a")  # ... and a worker ran it, then died before sending b
    assert _two_passes(fleet) == [f"{run.id}-0"]
    assert _ids(redis_client, queue) == [f"{run.id}-0-n-b"]


def test_a_graph_item_whose_steps_all_ended_gets_its_outcome(fleet: Fleet, redis_client: redis.Redis) -> None:
    run = fleet.graph(GRAPH, [{"n": 1}])
    redis_client.delete(fleet.settings.queues.agents)
    _step_done(fleet, run, 0, "a")
    _step_done(fleet, run, 0, "b")
    _two_passes(fleet)
    (outcome,) = run.outcomes()
    assert outcome.ok and outcome.steps == {"a": "succeeded", "b": "succeeded"}
    assert outcome.result == {"a": {"step": "a"}, "b": {"step": "b"}}


def test_a_batch_message_stands_for_its_items_until_it_is_lost(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    queue = fleet.settings.queues.agents
    run = fleet.map("t.echo", [{"n": n} for n in range(5)], batch_size=3)
    assert _ids(redis_client, queue) == [f"{run.id}-b3", f"{run.id}-b0"]
    reconciler = Reconciler(runtime(fleet.settings), fleet.app, node="test")
    assert reconciler.pass_once(now=time.time() + 60).recovered == [], "both batches are waiting"
    reconciler.release()
    redis_client.rpop(queue)  # the first batch is lost
    assert sorted(_two_passes(fleet)) == [f"{run.id}-{n}" for n in range(3)], "its items come back alone"


def test_a_lost_compensation_message_is_sent_again(fleet: Fleet, redis_client: redis.Redis) -> None:
    run = fleet.map("t.echo", [{"n": 1}])
    _, key, item = fleet.store.items(run.id)[0]
    fleet.store.finish(
        TaskOutcome(task_id=f"{run.id}-0", run_id=run.id, item_key=item, ok=True, idempotency_key=key)
    )
    fleet.store.client.zadd(fleet.store.run_key(run.id, "undo"), {key: time.time()})  # one success to undo
    assert run.compensate()
    fanin = fleet.settings.queues.fanin
    assert _ids(redis_client, fanin) == [f"{run.id}-comp"]
    redis_client.delete(fanin)
    reconciler = Reconciler(runtime(fleet.settings), fleet.app, node="test")
    now = time.time()
    reconciler.pass_once(now=now)
    assert reconciler.pass_once(now=now + 10).compensations == 1
    assert _ids(redis_client, fanin) == [f"{run.id}-comp"]
    assert run.id in fleet.store.active_runs(), "it stays active until its compensation is done"
