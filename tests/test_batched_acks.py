"""Acknowledgements on real workers of every pool: a fleet item's within ``ACK_DELAY_S`` (it rides
with the next round trip), a plain Celery task's when the task ends, as kombu's own.

A worker acknowledges a finished message by removing its ``unacked`` entry. Here each item runs
alone on an idle worker, so nothing else carries its acknowledgement: the event loop's timer
sends it on prefork and threads workers, the channel's flusher on gevent workers (whose consumer
sits in a one-second ``BRPOP``). Also: nothing is left to redeliver after a worker stops right
after its last task.
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.config import load_settings

pytestmark = pytest.mark.slow

# Items measured per kind and pool, one at a time.
ITEMS = 4


def _unacked_ids(client: redis.Redis) -> set[str]:
    """Task ids of every message recorded as unacknowledged."""
    ids = set()
    for raw in client.hvals("unacked"):
        message = json.loads(raw)[0]
        ids.add(message["headers"]["id"])
    return ids


def _tag_of(client: redis.Redis, task_id: str) -> str | None:
    for tag, raw in client.hgetall("unacked").items():
        if json.loads(raw)[0]["headers"]["id"] == task_id:
            return str(tag)
    return None


def _ack_delay_s(client: redis.Redis, token: str, task_id: str) -> float:
    """Seconds from the body's end (its mark seen) to the item's entry leaving ``unacked``."""
    deadline = time.monotonic() + 60
    while not client.exists(f"test:end:{token}"):
        assert time.monotonic() < deadline, f"{task_id} never ran"
        time.sleep(0.002)
    ended = time.monotonic()
    tag = _tag_of(client, task_id)
    while tag is not None and client.hexists("unacked", tag):
        assert time.monotonic() - ended < 30, f"{task_id} was never acknowledged"
        time.sleep(0.002)
    return time.monotonic() - ended


@pytest.fixture(scope="module")
def client(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url, decode_responses=True) as opened:
        yield opened


@pytest.mark.parametrize("pool", ["prefork", "threads", "gevent"])
def test_each_acknowledgement_reaches_redis_soon_after_its_task_on_every_pool(
    redis_url: str, client: redis.Redis, key_prefix: str, pool: str
) -> None:
    queues = {name: f"{key_prefix}.{name}" for name in ("agents", "fanin", "maintenance")}
    env = cluster_env(AGENTFLEET_TASK_MODULES="fleet_test_tasks,ack_test_tasks")
    with LocalCluster(
        workers=1, concurrency=2, pool=pool, broker_url=redis_url, env=env,
        settings=load_settings(queues=queues), stop_timeout_s=5,
    ) as cluster:  # fmt: skip
        fleet = cluster.fleet()
        delays: dict[str, list[float]] = {"fleet": [], "plain": []}
        for _ in range(ITEMS):
            token = uuid.uuid4().hex
            run = fleet.map("ack_test_tasks.fleet_marked", [{"token": token}])
            delays["fleet"].append(_ack_delay_s(client, token, f"{run.id}-0"))
            token = uuid.uuid4().hex
            sent = fleet.app.send_task("ack_test_tasks.plain_marked", args=[token], queue=queues["agents"])
            delays["plain"].append(_ack_delay_s(client, token, sent.id))
        assert cluster.workers[0].alive()
    # The bound is ACK_DELAY_S (50 ms); kombu's one-second BRPOP is what it must not wait for.
    assert statistics.median(delays["fleet"]) < 0.4, delays
    assert statistics.median(delays["plain"]) < 0.4, delays


def test_a_worker_stopped_right_after_its_last_task_leaves_nothing_to_redeliver(
    redis_url: str, client: redis.Redis, key_prefix: str
) -> None:
    queues = {name: f"{key_prefix}.{name}" for name in ("agents", "fanin", "maintenance")}
    with LocalCluster(
        workers=1, concurrency=4, pool="threads", broker_url=redis_url, env=cluster_env(),
        settings=load_settings(queues=queues), stop_timeout_s=20,
    ) as cluster:  # fmt: skip
        run = cluster.fleet().map("fleet_test_tasks.echo", [{"n": n} for n in range(20)])
        assert run.wait(timeout_s=120).succeeded == 20
    # Stopped at once (a warm stop): the waiting acknowledgements went before the connection.
    ids = {f"{run.id}-{n}" for n in range(20)}
    assert not ids & _unacked_ids(client)
    suffixes = ("", "\x06\x163", "\x06\x166", "\x06\x169")  # kombu's priority steps
    assert all(client.llen(f"{queues['agents']}{suffix}") == 0 for suffix in suffixes)
