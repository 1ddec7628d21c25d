"""A gevent worker whose every slot is busy takes its next message as soon as a slot frees.

Without an event loop, the worker reads messages with ``drain_events(timeout=2.0)`` and sends no
``BRPOP`` while its prefetch window is full; kombu's own poller then sleeps out the timeout, so
the next message started up to 2 s after a slot freed (half of a 100-slot pool idle on 1 s
tasks). ``agentfleet.transport.redis_channel`` looks again every 10 ms while the window is full.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from worker_env import cluster_env

from agentfleet import LocalCluster

pytestmark = pytest.mark.slow

SLOTS = 2


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(
        workers=1, concurrency=SLOTS, pool="gevent", env=cluster_env(), stop_timeout_s=2
    ) as running:
        yield running


def test_the_next_message_starts_when_a_slot_frees_not_at_the_next_poll(cluster: LocalCluster) -> None:
    # Two items fill both slots for 1 s; the third waits for a slot.
    inputs = [{"n": 0, "sleep_s": 1.0}, {"n": 1, "sleep_s": 1.0}, {"n": 2, "sleep_s": 0.0}]
    run = cluster.fleet().map("fleet_test_tasks.timed", inputs)
    assert run.wait(timeout_s=60).succeeded == 3
    by_n = {o.result["n"]: o.result for o in run.outcomes()}
    first_free = min(by_n[0]["end"], by_n[1]["end"])
    # kombu's poller alone: about 1 s later (its 2 s timeout started when the window filled).
    assert by_n[2]["start"] - first_free < 0.5, by_n


def test_a_gevent_workers_buffered_task_events_reach_a_receiver(cluster: LocalCluster) -> None:
    fleet = cluster.fleet()
    seen: list[dict[str, Any]] = []
    with fleet.app.connection_for_read() as connection:
        receiver = fleet.app.events.Receiver(connection, handlers={"*": seen.append})
        listener = threading.Thread(
            target=lambda: receiver.capture(limit=None, timeout=30, wakeup=False), daemon=True
        )
        listener.start()
        time.sleep(1.0)  # the receiver's queue is bound
        run = fleet.map("fleet_test_tasks.echo", [{"n": n} for n in range(6)])
        assert run.wait(timeout_s=60).succeeded == 6
        ids = {f"{run.id}-{n}" for n in range(6)}

        def of(kind: str) -> set[str]:
            return {e.get("uuid", "") for e in list(seen) if e["type"] == kind}

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not ids <= of("task-succeeded"):
            time.sleep(0.1)
        receiver.should_stop = True
        listener.join(timeout=5)
    assert ids <= of("task-received") and ids <= of("task-started") and ids <= of("task-succeeded")
