"""Messages a worker took and died holding, of each kind the reconciler sends again.

A worker that dies holding a message leaves it in the broker's ``unacked`` hash (and
``unacked_index``) until the visibility timeout. The reconciler sends such an item again and
drops that stale copy from the broker, wherever agentfleet's own state lives. The messages
here are published to queues no worker reads (``dispatch.require_workers`` off).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import redis

from agentfleet import Node
from agentfleet.config import Settings, load_settings
from agentfleet.models import TaskOutcome
from agentfleet.orchestration import Fleet
from agentfleet.tasks.reconciler import PassReport, Reconciler
from agentfleet.tasks.runtime import runtime
from agentfleet.transport.layout import UNACKED, UNACKED_INDEX

#: The kinds of message a test strands: a map's item, a graph's step, a run's compensation.
KINDS = ("item", "graph step", "compensation")

#: How long ago (seconds) a stranded copy was taken: past the reconciler's grace (5 s here), well
#: inside the broker's visibility timeout (an hour). Older than that timeout, any worker of any
#: test on the same broker would put it back in its queue (kombu's restore sweep runs every
#: ~10 s on an idle consumer) while the test looks, and the reconciler would find it waiting.
TAKEN_AGO_S = 60.0


@dataclass
class Stranded:
    """A message taken off ``queue`` and left unacknowledged under ``tag`` a minute ago."""

    kind: str
    run_id: str
    task_id: str
    queue: str
    tag: str

    def recovered(self, report: PassReport) -> bool:
        """Whether ``report`` says the reconciler sent this message's work again."""
        if self.kind == "compensation":
            return report.compensations == 1
        return report.recovered == [f"{self.run_id}-0"]


def reconciling_settings(redis_url: str, short: str) -> Settings:
    """Settings of a fleet of its own on ``redis_url`` (prefix and queues ``<short><tag>``) whose
    reconciler acts after 5 s, for tests with no worker: the messages are what they look at."""
    tag = short + uuid.uuid4().hex[:8]
    return load_settings(
        broker_url=redis_url,
        key_prefix=tag,
        queues={"agents": f"{tag}.agents", "fanin": f"{tag}.fanin", "maintenance": f"{tag}.m"},
        delivery={"reconcile_grace_s": 5.0, "reconcile_interval_s": 1.0},
        dispatch={"require_workers": False},
    )


def strand(broker: redis.Redis, queue: str, task_id: str) -> str:
    """Take ``task_id``'s message off ``queue`` and leave it unacknowledged, taken a minute ago,
    as a worker that died holding it leaves it; its delivery tag."""
    for raw in broker.lrange(queue, 0, -1):
        message = json.loads(raw)
        if message["headers"]["id"] == task_id:
            broker.lrem(queue, 1, raw)
            tag = f"stale-{uuid.uuid4().hex[:8]}"
            broker.hset(UNACKED, tag, json.dumps([message, "", queue]))
            broker.zadd(UNACKED_INDEX, {tag: time.time() - TAKEN_AGO_S})
            return tag
    raise AssertionError(f"no message of {task_id} in {queue}")


def _compensation_requested(fleet: Fleet) -> str:
    run = fleet.map("t.echo", [{"n": 1}])
    _, key, item = fleet.store.items(run.id)[0]
    fleet.store.finish(
        TaskOutcome(task_id=f"{run.id}-0", run_id=run.id, item_key=item, ok=True, idempotency_key=key)
    )
    fleet.store.client.zadd(fleet.store.run_key(run.id, "undo"), {key: time.time()})  # one success to undo
    assert run.compensate()
    return run.id


def lose(kind: str, fleet: Fleet, broker: redis.Redis) -> Stranded:
    """Dispatch a run whose ``kind`` message a worker then took and died holding."""
    queues = fleet.settings.queues
    if kind == "item":
        run_id = fleet.map("t.echo", [{"n": 1}]).id
        task_id, queue = f"{run_id}-0", queues.agents
    elif kind == "graph step":
        run_id = fleet.graph([Node("a", "t.a")], [{"n": 1}]).id
        task_id, queue = f"{run_id}-0-n-a", queues.agents
    else:
        run_id = _compensation_requested(fleet)
        task_id, queue = f"{run_id}-comp", queues.fanin
    return Stranded(kind, run_id, task_id, queue, strand(broker, queue, task_id))


def two_passes(fleet: Fleet) -> PassReport:
    """A reconciler's second pass, past the grace after the first marked what it found."""
    reconciler = Reconciler(runtime(fleet.settings), fleet.app, node="test")
    try:
        now = time.time()
        assert reconciler.pass_once(now=now).acted
        return reconciler.pass_once(now=now + fleet.settings.delivery.reconcile_grace_s + 1)
    finally:
        reconciler.release()


def waiting_ids(broker: redis.Redis, queue: str) -> list[str]:
    return [json.loads(raw)["headers"]["id"] for raw in broker.lrange(queue, 0, -1)]


def forget(broker: redis.Redis, tag: str) -> None:
    """Drop a stranded copy a failed test left behind on a shared broker."""
    broker.hdel(UNACKED, tag)
    broker.zrem(UNACKED_INDEX, tag)
