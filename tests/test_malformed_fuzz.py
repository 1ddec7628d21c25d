"""Fuzz: a thousand bad entries among a run's messages stop no worker and lose no item.

Two real workers (windows of four: both reading paths; on the threads pool, the prefork pool,
which hands a task to its processes later from its event loop, and gevent, whose loop has no
event hub) take a queue holding the
200 messages of a real ``Fleet.map`` run, shuffled among 1,000 bad entries: random byte strings
and real task messages (another run's, as dispatch makes them) mutated field by field
(``malformed_fuzz_support``). Every item of the run ends ok, both workers are alive, the queue
and its unacknowledged records are empty, and every random byte string was counted as a
malformed entry (kept as a dead letter or dropped). A mutated message may still be a task
(a byte flipped in a header's text): it runs, as an item of the other run.

``AGENTFLEET_FUZZ_SEED`` replays a run; the seed is in every failure message and in the
counts printed at the end (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from collections.abc import Iterator

import fleet_test_tasks as tt
import pytest
import redis
from malformed_fuzz_support import fresh, mutated, random_bytes
from malformed_support import push
from worker_env import cluster_env, own_queues

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.dlq import DLQFilter, DLQStore
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.transport.layout import queue_keys

pytestmark = pytest.mark.slow

BAD = 1000
GOOD = 200


@pytest.fixture
def private_redis() -> Iterator[str]:
    """A Redis of the test's own: the bytes it pushes never meet other tests' scans."""
    with EmbeddedRedis() as server:
        yield server.url


def _take_all(client: redis.Redis, queue: str) -> list[bytes]:
    """Every message waiting in ``queue``, from its priority lists too (a run's priority)."""
    taken = []
    for key in queue_keys(queue):
        while (raw := client.rpop(key)) is not None:
            taken.append(raw)
    return taken


def _settled(store: DLQStore) -> dict[str, int]:
    # The last dead letters are written just after their records are forgotten.
    counts, again = store.malformed_counts(), {}
    while again != counts:
        time.sleep(1.0)
        counts, again = store.malformed_counts(), counts
    return counts


def _unacked_of(client: redis.Redis, queue: str) -> int:
    """Unacknowledged records of messages routed to ``queue`` (any other program's included)."""
    found = 0
    for record in client.hgetall("unacked").values():
        try:
            found += json.loads(record, strict=False)[2] == queue
        except (ValueError, IndexError, TypeError):
            found += queue.encode() in record
    return found


def _wait(predicate: object, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("pool", ["threads", "prefork", "gevent"])
def test_a_thousand_bad_entries_among_a_runs_messages_stop_no_worker(private_redis: str, pool: str) -> None:
    redis_url = private_redis
    seed = int(os.environ.get("AGENTFLEET_FUZZ_SEED") or random.randrange(2**32))
    rng = random.Random(seed)
    prefix = f"z{uuid.uuid4().hex[:8]}"
    settings = load_settings(
        queues=own_queues(prefix),
        key_prefix=prefix,
        dispatch={"require_workers": False},
        broker_url=redis_url,
    )
    client = redis.Redis.from_url(redis_url)
    started = time.monotonic()
    with LocalCluster(
        workers=0, concurrency=4, pool=pool, broker_url=redis_url, env=cluster_env(), settings=settings
    ) as cluster:
        queue = settings.queues.agents
        fleet = cluster.fleet()
        fleet.map(tt.echo, [{"n": -n} for n in range(1, 21)])
        templates = [fresh(raw, queue) for raw in _take_all(client, queue)]
        run = fleet.map(tt.echo, [{"n": n} for n in range(GOOD)])
        good = _take_all(client, queue)
        assert len(templates) == 20 and len(good) == GOOD
        random_ones = [random_bytes(rng) for _ in range(BAD // 2)]
        mutations = [mutated(rng, rng.choice(templates)) for _ in range(BAD - len(random_ones))]
        entries = [*good, *random_ones, *mutations]
        rng.shuffle(entries)
        for start in range(0, len(entries), 200):
            push(client, queue, *entries[start : start + 200])
        workers = [cluster.add_worker(wait=False), cluster.add_worker(wait=False)]
        cluster.wait_ready()

        summary = run.wait(timeout_s=300)
        assert (summary.succeeded, summary.failed) == (GOOD, 0), f"seed {seed}: {summary}"
        _wait(
            lambda: client.llen(queue) == 0 and _unacked_of(client, queue) == 0, 120, f"seed {seed}: drained"
        )
        store = DLQStore.from_settings(settings)
        counts = _settled(store)
        assert all(worker.alive() for worker in workers), f"seed {seed}: a worker stopped"
        kept = len(store.ids(DLQFilter(category="malformed")))
        taken_out = counts["dead_lettered"] + counts["dropped"]
        assert taken_out >= len(random_ones), f"seed {seed}: {counts}"
        assert kept <= counts["dead_lettered"]
        print(
            f"\nfuzz ({pool}) seed {seed}: {len(random_ones)} random byte strings, "
            f"{len(mutations)} mutated messages, "
            f"{GOOD} good items (all ok); dead-lettered as malformed {counts['dead_lettered']} "
            f"({kept} distinct entries), dropped and counted {counts['dropped']}, "
            f"still tasks {BAD - taken_out}; {time.monotonic() - started:.0f} s"
        )
