"""A bad message never stops a worker: real worker processes, entries pushed raw into their
queue (``LPUSH``, as any program on the Redis could).

Before: a worker stopped on an entry that is not JSON, a JSON list, or a message in a content
type Celery cannot use ("Unrecoverable error"); one that had been recorded came back first for
the next worker, which stopped too. Now each is taken out of the queue and kept as a dead letter
of category ``malformed``, the messages taken with it run, and both workers go on, on
agentfleet's transport and, for what Celery itself cannot take, on kombu's stock one.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import fleet_test_tasks as tt
import pytest
import redis
from malformed_support import bad_entries, push
from worker_env import TESTS_DIR, cluster_env, own_queues

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.dlq import DeadLetter, DLQFilter, DLQStore
from agentfleet.transport.layout import queue_keys

pytestmark = pytest.mark.slow

TASK = "fleet_test_tasks.echo"


def _cluster(redis_url: str, *, workers: int, env: dict[str, str] | None = None) -> LocalCluster:
    prefix = f"m{uuid.uuid4().hex[:8]}"
    settings = load_settings(
        queues=own_queues(prefix),
        key_prefix=prefix,
        dispatch={"require_workers": False},
        broker_url=redis_url,
    )
    return LocalCluster(
        workers=workers,
        concurrency=4,
        pool="threads",
        broker_url=redis_url,
        env=env or cluster_env(),
        settings=settings,
        startup_timeout_s=120,
    )


@pytest.fixture(scope="module")
def cluster(redis_url: str) -> Iterator[LocalCluster]:
    with _cluster(redis_url, workers=2) as running:
        yield running


def _store(cluster: LocalCluster) -> DLQStore:
    return DLQStore.from_settings(cluster.settings)


def _malformed(cluster: LocalCluster) -> list[DeadLetter]:
    return _store(cluster).find(DLQFilter(category="malformed"), limit=None)


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _unacked_of(client: redis.Redis, queue: str) -> list[str]:
    """Unacknowledged records of messages routed to ``queue`` (any other program's included)."""
    found = []
    for tag, record in client.hgetall("unacked").items():
        try:
            ours = json.loads(record, strict=False)[2] == queue
        except (ValueError, IndexError, TypeError):
            ours = queue in record
        if ours:
            found.append(tag)
    return found


def _wait_drained(client: redis.Redis, queue: str) -> None:
    # Acknowledgements ride with a later round trip: wait for them, not for a moment.
    _wait_for(lambda: client.llen(queue) == 0 and not _unacked_of(client, queue), 30, f"{queue} to drain")


def _all_alive(cluster: LocalCluster) -> bool:
    return bool(cluster.workers) and all(worker.alive() for worker in cluster.workers)


@pytest.mark.parametrize("kind", list(bad_entries("q", TASK)))
def test_each_kind_of_bad_entry_becomes_a_malformed_dead_letter_and_the_workers_go_on(
    cluster: LocalCluster, redis_client: redis.Redis, kind: str
) -> None:
    queue = cluster.settings.queues.agents
    raw, reason = bad_entries(queue, TASK)[kind]
    before = {entry.id for entry in _malformed(cluster)}
    push(redis.Redis.from_url(cluster.broker_url), queue, raw)

    def kept() -> list[DeadLetter]:
        return [entry for entry in _malformed(cluster) if entry.id not in before]

    _wait_for(lambda: bool(kept()), 30, f"the dead letter of {kind}")
    (entry,) = kept()
    assert reason in entry.error and entry.queue == queue
    assert entry.raw_message
    assert _all_alive(cluster), "a worker stopped"
    _wait_drained(redis_client, queue)
    # And they take work as before.
    summary = cluster.fleet().map(tt.echo, [{"n": 1}, {"n": 2}]).wait(timeout_s=60)
    assert summary.succeeded == 2
    assert _store(cluster).malformed_counts()["dead_lettered"] >= 1


def test_bad_entries_among_a_runs_messages_leave_every_item_to_run_and_both_workers_alive(
    redis_url: str, redis_client: redis.Redis
) -> None:
    # The case: taken in one window with good messages, a bad entry was put back first
    # in the queue with them, and the next worker stopped on it too.
    with _cluster(redis_url, workers=0) as cluster:
        queue = cluster.settings.queues.agents
        run = cluster.fleet().map(tt.echo, [{"n": n} for n in range(30)])
        good = []
        for key in queue_keys(queue):
            while (raw := redis_client.rpop(key)) is not None:
                good.append(raw)
        assert len(good) == 30
        bad = [raw for raw, _ in bad_entries(queue, TASK).values()]
        # One of each kind, every other message (the rest of the window carries most).
        mixed: list[bytes | str] = []
        for n, message in enumerate(good):
            mixed.append(message)
            if n % 2 == 1 and n // 2 < len(bad):
                mixed.append(bad[n // 2])
        assert len(good) // 2 >= len(bad)
        push(redis.Redis.from_url(cluster.broker_url), queue, *mixed)
        cluster.add_worker(wait=False)
        cluster.add_worker(wait=False)
        cluster.wait_ready()
        summary = run.wait(timeout_s=120)
        assert summary.succeeded == 30 and summary.failed == 0
        _wait_for(lambda: len(_malformed(cluster)) == len(bad), 30, "every bad entry's dead letter")
        assert _all_alive(cluster)
        _wait_drained(redis_client, queue)
        assert _store(cluster).malformed_counts() == {"dead_lettered": len(bad), "dropped": 0}


# Every process started with this folder on PYTHONPATH imports it first: kombu's channel lacks a
# name agentfleet's transport needs (a release that removed it), so kombu's stock one is used.
STOCK_TRANSPORT = """
from agentfleet.transport import internals

internals.NEEDS = internals.NEEDS + (
    internals.Need("redis_transport", "kombu", "kombu.transport.redis:Channel", "_gone_in_this_release"),
)
"""

# What Celery itself reads: kombu's stock read takes the rest (not JSON, not an object, not
# kombu's envelope) before any seam of Celery's, and stops the worker on it.
CELERY_LEVEL = (
    "a content type refused",
    "a body that is not JSON",
    "a body that is not a list",
    "no Celery headers",
    "a task no worker has",
)


def test_on_kombus_stock_transport_what_celery_cannot_take_is_dead_lettered_too(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(STOCK_TRANSPORT))
    env = cluster_env(PYTHONPATH=os.pathsep.join([str(tmp_path), TESTS_DIR]))
    with _cluster(redis_url, workers=1, env=env) as cluster:
        worker = cluster.workers[0]
        assert "the Redis transport" in worker.log_text() and "stock behaviour" in worker.log_text()
        queue = cluster.settings.queues.agents
        entries = bad_entries(queue, TASK)
        push(redis.Redis.from_url(cluster.broker_url), queue, *(entries[kind][0] for kind in CELERY_LEVEL))
        _wait_for(lambda: len(_malformed(cluster)) == len(CELERY_LEVEL), 30, "the dead letters")
        errors = " | ".join(entry.error for entry in _malformed(cluster))
        assert all(entries[kind][1] in errors for kind in CELERY_LEVEL), errors
        assert worker.alive()
        _wait_drained(redis_client, queue)
        assert cluster.fleet().map(tt.echo, [{"n": 1}]).wait(timeout_s=60).succeeded == 1
