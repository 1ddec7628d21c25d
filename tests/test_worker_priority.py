"""Priority holds across the queues a worker consumes: its first look takes the highest
priorities of all its queues, not the rest of the queue its ``BRPOP`` answered.

A backlog waits before a real worker (3 slots, so a window of 3) starts: its agents queue holds
one message of the highest priority and two of the lowest, its fan-in queue two of a middle
one. kombu's own transport takes the highest, then the two middle ones; so does agentfleet's,
in one look.
"""

from __future__ import annotations

import time

import pytest
import redis
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.celery_config import make_app
from agentfleet.config import load_settings

pytestmark = pytest.mark.slow

TASK_S = 3.0


def test_a_workers_first_look_takes_the_highest_priorities_across_its_queues(
    redis_url: str, redis_client: redis.Redis, key_prefix: str
) -> None:
    queues = {name: f"{key_prefix}.{name}" for name in ("agents", "fanin", "maintenance")}
    settings = load_settings(queues=queues, broker_url=redis_url)
    backlog = [  # (queue, token, kombu priority: 0 is served first, 9 last)
        ("agents", f"{key_prefix}-a-high", 0),
        ("agents", f"{key_prefix}-a-low-1", 9),
        ("agents", f"{key_prefix}-a-low-2", 9),
        ("fanin", f"{key_prefix}-b-mid-1", 4),
        ("fanin", f"{key_prefix}-b-mid-2", 4),
    ]
    app = make_app(settings)
    for queue, token, priority in backlog:
        app.send_task(
            "ack_test_tasks.timed_plain", args=[token, TASK_S], queue=queues[queue], priority=priority
        )
    env = cluster_env(AGENTFLEET_TASK_MODULES="fleet_test_tasks,ack_test_tasks")
    with LocalCluster(
        workers=1, concurrency=3, pool="threads", broker_url=redis_url, env=env, settings=settings,
        stop_timeout_s=10,
    ):  # fmt: skip
        deadline = time.monotonic() + 60
        keys = [f"test:start:{token}" for _, token, _ in backlog]
        while not all(redis_client.exists(key) for key in keys):
            assert time.monotonic() < deadline, "the backlog never ran"
            time.sleep(0.1)
    starts = {token: float(redis_client.get(f"test:start:{token}") or 0) for _, token, _ in backlog}
    first = min(starts.values())
    # The first look's three start together; the other two wait for a slot (TASK_S).
    together = {
        token.removeprefix(f"{key_prefix}-") for token, at in starts.items() if at - first < TASK_S / 2
    }
    assert together == {"a-high", "b-mid-1", "b-mid-2"}
