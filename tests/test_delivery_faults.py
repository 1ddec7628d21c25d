"""The delivery guarantee under faults: every item ends with exactly one outcome, whatever dies.

Each test runs real worker processes against a Redis of its own, breaks something for real
(SIGSTOP and SIGKILL of workers, ``kill -9`` of an append-only Redis, a broker stopped for
10 s, copies of the same message delivered together) and then counts at the far end: the
``effect`` task writes one line per body execution and one file per applied effect outside
Redis. Each test asserts that every item has exactly one outcome, the run finishes, the body
ran again only for items a killed worker was running, and no keyed effect happened twice.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import fleet_test_tasks as tt
import pytest
import redis
from fault_support import (
    Effects,
    fault_cluster,
    freeze_in_brpop,
    outcome_events,
    tokens,
    wait_until,
)

from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.protocol.messages import item_signature
from agentfleet.protocol.meta import ItemMeta

pytestmark = pytest.mark.slow


@pytest.fixture
def private_redis() -> Iterator[EmbeddedRedis]:
    """A Redis for this test alone, with the append-only file on, as production runs it."""
    server = EmbeddedRedis(appendonly=True).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def effects(tmp_path: Path) -> Effects:
    return Effects(tmp_path / "effects")


def _assert_each_once(run_outcomes: dict[int, int], effects: Effects, n: int, prefix: str) -> None:
    assert sorted(run_outcomes) == list(range(n)), "every item has an outcome"
    assert set(run_outcomes.values()) == {1}, "and exactly one"
    applied = effects.applied()
    assert set(applied) == {f"{prefix}-{i}" for i in range(n)}
    assert set(applied.values()) == {1}, "no keyed effect happened twice"


def test_a_message_a_dying_worker_had_popped_is_sent_again(
    private_redis: EmbeddedRedis, effects: Effects
) -> None:
    client = redis.Redis.from_url(private_redis.url, decode_responses=True)
    with fault_cluster(private_redis.url, effects, workers=1) as cluster:
        frozen = cluster.workers[0]
        queue = cluster.settings.queues.agents
        # A pending BRPOP lasts a second: on a loaded machine the dispatch may miss it, and then
        # the worker, thawed, simply runs that attempt's run. Try until the window is hit.
        for attempt in range(5):
            freeze_in_brpop(frozen.pid, client)
            prefix = f"pop{attempt}"
            run = cluster.fleet().map(tt.effect, tokens(prefix, 5))
            try:
                # The pending BRPOP takes one message off the queue; nothing records it anywhere.
                wait_until(lambda: client.llen(queue) == 4, 3, "the frozen worker to pop one message")
                break
            except AssertionError:
                frozen.process.send_signal(signal.SIGCONT)
                assert run.wait(timeout_s=60).succeeded == 5
                # Its fleet items' acknowledgements go out up to 50 ms after their outcomes:
                # let them, before the worker is frozen again.
                wait_until(lambda: client.hlen("unacked") == 0, 10, "the thawed worker's acknowledgements")
        else:
            pytest.fail("the dispatch never met the frozen worker's BRPOP")
        assert client.hlen("unacked") == 0
        cluster.kill_worker(frozen)
        cluster.add_worker()
        summary = run.wait(timeout_s=90)
    assert (summary.succeeded, summary.timed_out) == (5, 0)
    # At least the lost one; on a loaded machine a copy a worker was slow to start may be sent
    # again too, and its claim keeps the body single.
    assert summary.recovered >= 1
    assert summary.status == "finished"
    executions = effects.executions()
    assert [executions[f"{prefix}-{i}"] for i in range(5)] == [1] * 5
    assert sorted(outcome_events(run)) == list(range(5))
    assert set(outcome_events(run).values()) == {1}


def test_overlapping_copies_of_one_message_run_the_body_once(
    private_redis: EmbeddedRedis, effects: Effects
) -> None:
    with fault_cluster(private_redis.url, effects, workers=2, concurrency=8) as cluster:
        fleet = cluster.fleet()
        inputs = tokens("dup", 10, sleep_s=1.5)
        run = fleet.map(tt.effect, inputs)
        queue = cluster.settings.queues.agents
        for idx, (_, key, item) in fleet.store.items(run.id).items():
            meta = ItemMeta(run=run.id, idx=idx, key=key, item=item)
            item_signature(
                fleet.app, names=[tt.effect.name], queues=[queue], meta=meta, inputs=inputs[idx]
            ).apply_async()
        summary = run.wait(timeout_s=90)
    assert (summary.succeeded, summary.timed_out, summary.retries) == (10, 0, 0)
    assert effects.executions() == {f"dup-{i}": 1 for i in range(10)}
    _assert_each_once(outcome_events(run), effects, 10, "dup")


def test_one_gevent_worker_runs_300_items_at_once_without_errors(
    private_redis: EmbeddedRedis, effects: Effects
) -> None:
    with fault_cluster(private_redis.url, effects, workers=1, concurrency=300, pool="gevent") as cluster:
        started = time.monotonic()
        run = cluster.fleet().map(
            "agentfleet.simulated_agent", [{"item": i, "latency_s": 1.0} for i in range(300)]
        )
        summary = run.wait(timeout_s=120)
        took = time.monotonic() - started
        log = cluster.workers[0].log_text()
    assert (summary.succeeded, summary.failed, summary.timed_out) == (300, 0, 0)
    assert "MaxConnectionsError" not in log and "Too many connections" not in log
    # 300 one-second items on 300 slots: far less than the 300 s they would take one at a time.
    assert took < 60


def test_items_of_a_sigkilled_worker_run_again_within_a_minute_by_default(
    private_redis: EmbeddedRedis, effects: Effects
) -> None:
    with fault_cluster(private_redis.url, effects, workers=2, concurrency=4, delivery=None) as cluster:
        run = cluster.fleet().map(tt.effect, tokens("kill", 8, sleep_s=3.0))
        wait_until(lambda: len(effects.executions()) == 8, 30, "every item to start")
        victim = cluster.workers[0]
        cluster.kill_worker(victim)
        killed_at = time.monotonic()
        summary = run.wait(timeout_s=150)
        recovered_after = time.monotonic() - killed_at
    assert (summary.succeeded, summary.timed_out) == (8, 0)
    assert summary.recovered >= 1
    # Claims lapse in 20 s, the reconciler sends them again 10 s after that (every 5 s), and the
    # bodies take 3 s: comfortably inside a minute on an idle machine, under a generous bound here.
    assert recovered_after < 90
    again = sum(effects.executions().values()) - 8
    assert again <= 4, "only the killed worker's items ran again"
    assert again <= summary.recovered
    _assert_each_once(outcome_events(run), effects, 8, "kill")


def test_1000_items_survive_five_sigkills_of_whole_workers(
    private_redis: EmbeddedRedis, effects: Effects
) -> None:
    slots = 8
    with fault_cluster(private_redis.url, effects, workers=3, concurrency=slots) as cluster:
        run = cluster.fleet().map(tt.effect, tokens("storm", 1000, sleep_s=0.15))
        rng = random.Random(7)
        for _ in range(5):
            time.sleep(1.5)
            cluster.kill_worker(rng.choice([w for w in cluster.workers if w.alive()]))
            cluster.add_worker(wait=False)
        summary = run.wait(timeout_s=300)
    assert (summary.succeeded, summary.timed_out) == (1000, 0)
    executions = effects.executions()
    assert set(executions) == {f"storm-{i}" for i in range(1000)}
    assert sum(executions.values()) <= 1000 + 5 * slots, "only what killed workers were running ran again"
    _assert_each_once(outcome_events(run), effects, 1000, "storm")


def test_a_run_survives_kill_9_of_its_append_only_redis(
    private_redis: EmbeddedRedis, effects: Effects
) -> None:
    with fault_cluster(private_redis.url, effects, workers=2, concurrency=4) as cluster:
        run = cluster.fleet().map(tt.effect, tokens("aof", 40, sleep_s=0.5))
        wait_until(lambda: len(effects.executions()) >= 10, 30, "a quarter of the run to start")
        private_redis.kill()
        time.sleep(1.0)
        private_redis.start()
        summary = run.wait(timeout_s=180)
    assert (summary.succeeded, summary.timed_out) == (40, 0)
    executions = effects.executions()
    assert sum(executions.values()) <= 40 + 2 * 4
    _assert_each_once(outcome_events(run), effects, 40, "aof")


def test_run_wait_rides_out_a_ten_second_broker_stop(private_redis: EmbeddedRedis, effects: Effects) -> None:
    def outage() -> None:
        time.sleep(2.0)
        private_redis.stop(keep_data=True)
        time.sleep(10.0)
        private_redis.start()

    with fault_cluster(private_redis.url, effects, workers=2, concurrency=4) as cluster:
        run = cluster.fleet().map(tt.effect, tokens("stop", 24, sleep_s=1.0))
        breaker = threading.Thread(target=outage)
        breaker.start()
        try:
            summary = run.wait(timeout_s=180)
        finally:
            breaker.join()
    assert (summary.succeeded, summary.timed_out) == (24, 0)
    assert sum(effects.executions().values()) <= 24 + 2 * 4
    _assert_each_once(outcome_events(run), effects, 24, "stop")


def test_a_frozen_worker_that_wakes_after_its_claim_lapsed_does_not_record_twice(
    private_redis: EmbeddedRedis, effects: Effects
) -> None:
    with fault_cluster(private_redis.url, effects, workers=2, concurrency=2) as cluster:
        run = cluster.fleet().map(tt.effect, tokens("wake", 4, sleep_s=2.0))
        wait_until(lambda: len(effects.executions()) == 4, 30, "every item to start")
        sleeper = cluster.workers[0]
        sleeper.process.send_signal(signal.SIGSTOP)
        # Its claims lapse (4 s) and the reconciler sends its items again; then it wakes.
        time.sleep(9.0)
        sleeper.process.send_signal(signal.SIGCONT)
        summary = run.wait(timeout_s=90)
    assert (summary.succeeded, summary.timed_out) == (4, 0)
    _assert_each_once(outcome_events(run), effects, 4, "wake")
