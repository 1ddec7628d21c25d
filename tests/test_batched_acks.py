"""Acknowledgements ride with the next round trip, on real workers of every pool.

A worker acknowledges a finished message by removing its ``unacked`` entry; the transport sends
those removals with the next message's record or, while no message comes, within
``ACK_DELAY_S``. Here: nothing a finished run sent stays unacknowledged on a threads worker
(the event loop's timer), on a gevent worker (the consumer loop), or after a worker stops right
after its last task.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import redis
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.transport.intake import ACK_DELAY_S

pytestmark = pytest.mark.slow


def _unacked_ids(client: redis.Redis) -> set[str]:
    """Task ids of every message recorded as unacknowledged."""
    ids = set()
    for raw in client.hvals("unacked"):
        message = json.loads(raw)[0]
        ids.add(message["headers"]["id"])
    return ids


def _settle(client: redis.Redis, ids: set[str], within_s: float) -> set[str]:
    """The ids of ``ids`` still unacknowledged after up to ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while (left := ids & _unacked_ids(client)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


@pytest.fixture(scope="module")
def client(redis_url: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_url) as opened:
        yield opened


@pytest.mark.parametrize("pool", ["threads", "gevent"])
def test_a_finished_runs_messages_are_all_acknowledged_soon_after(
    redis_url: str, client: redis.Redis, key_prefix: str, pool: str
) -> None:
    queues = {name: f"{key_prefix}.{name}" for name in ("agents", "fanin", "maintenance")}
    with LocalCluster(
        workers=1, concurrency=4, pool=pool, broker_url=redis_url, env=cluster_env(),
        settings=load_settings(queues=queues), stop_timeout_s=5,
    ) as cluster:  # fmt: skip
        run = cluster.fleet().map("fleet_test_tasks.echo", [{"n": n} for n in range(40)])
        assert run.wait(timeout_s=120).succeeded == 40
        ids = {f"{run.id}-{n}" for n in range(40)}
        # The last acknowledgements wait for no other message: the worker sends them itself.
        assert not _settle(client, ids, within_s=2.0 + 10 * ACK_DELAY_S)
        assert cluster.workers[0].alive()


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
