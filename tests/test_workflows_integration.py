"""Dependency graphs, compensations and batches on real workers.

Graphs: steps run once their dependencies succeeded, a failure skips its dependents while the
other branches finish, the summary and ``runs show`` count per step, and a failed step's dead
letter requeues alone. Compensations: what the far end saw undone, in which order, how often.
Batches: each item keeps its own outcome, retries and dead letter inside a shared message.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import durable_test_tasks as dt
import fleet_test_tasks as tt
import pytest
from durable_support import FAR_HOST, durable_cluster
from fault_support import Effects, wait_until
from http_scripted import Reply, ScriptedServer

from agentfleet import LocalCluster, Node
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.orchestration import Fleet, Run
from agentfleet.protocol.batches import batch_signatures
from agentfleet.protocol.messages import compensation_signature
from agentfleet.protocol.meta import ItemMeta

pytestmark = pytest.mark.slow

GRAPH = [
    Node("fetch", dt.fetch),
    Node("summarize", dt.summarize, after=["fetch"]),
    Node("classify", dt.classify, after=["fetch"]),
    Node("report", dt.report, after=["summarize", "classify"]),
]


@pytest.fixture(scope="module")
def effects(tmp_path_factory: pytest.TempPathFactory) -> Effects:
    return Effects(tmp_path_factory.mktemp("effects"))


@pytest.fixture(scope="module")
def far() -> Iterator[ScriptedServer]:
    with ScriptedServer(host=FAR_HOST) as server:
        server.script("/draw", Reply(200, {"ok": True}))
        yield server


@pytest.fixture(scope="module")
def wcluster(redis_url: str, far: ScriptedServer, effects: Effects) -> Iterator[LocalCluster]:
    with (
        MockMessagesServer() as mock,
        durable_cluster(redis_url, mock, far, AGENTFLEET_TEST_EFFECTS=str(effects.root)) as running,
    ):
        yield running


@pytest.fixture
def fleet(wcluster: LocalCluster, far: ScriptedServer) -> Fleet:
    far.script("/summarize", Reply(200, {}))
    return wcluster.fleet()


def _undone(far: ScriptedServer, books: range) -> list[int]:
    """The bookings undone at the far end, in the order the undoing arrived."""
    hits = sorted((hit.at, n) for n in books for hit in far.hits(f"/undo/{n}"))
    return [n for _, n in hits]


def _compensated(run: Run) -> None:
    wait_until(lambda: run.summary().compensation == "done", 60, "the run's compensation")


# Graphs ------------------------------------------------------------------------------------


def test_a_graph_joins_two_parallel_steps_after_a_common_one(fleet: Fleet) -> None:
    urls = [{"url": f"https://news.example/{i}", "style": "long"} for i in range(3)]
    run = fleet.graph(GRAPH, urls)
    summary = run.wait(timeout_s=60)
    assert summary.succeeded == 3, summary
    outcome = run.outcomes()[1]
    assert outcome.steps == dict.fromkeys(["fetch", "summarize", "classify", "report"], "succeeded")
    assert outcome.result["report"] == {"report": "https://news.example/1 [news] long: words of htt"}
    assert outcome.result["classify"] == {"label": "news"}
    assert summary.steps["report"] == {"succeeded": 3, "failed": 0, "skipped": 0}
    assert outcome.attempts == 4, "one execution per step"


def test_a_failed_step_skips_its_dependents_while_the_other_branch_finishes(
    fleet: Fleet, far: ScriptedServer
) -> None:
    far.script("/summarize", Reply(503, {}))
    run = fleet.graph(GRAPH, [{"url": "https://blog.example/a"}])
    summary = run.wait(timeout_s=60)
    (outcome,) = run.outcomes()
    assert (outcome.ok, outcome.error_type) == (False, "PermanentError")
    assert outcome.error == "step summarize failed: the summarizer answered 503"
    assert outcome.steps == {
        "fetch": "succeeded",
        "summarize": "failed",
        "classify": "succeeded",
        "report": "skipped",
    }
    assert outcome.result == {"fetch": outcome.result["fetch"], "classify": {"label": "blog"}}
    assert summary.steps["report"] == {"succeeded": 0, "failed": 0, "skipped": 1}
    (entry,) = fleet.dlq.list(run_id=run.id)
    assert (entry.node, entry.task_name) == ("summarize", dt.summarize.name)


def test_a_requeued_step_runs_alone_and_releases_what_it_had_skipped(
    fleet: Fleet, far: ScriptedServer
) -> None:
    far.script("/summarize", Reply(503, {}))
    run = fleet.graph(GRAPH, [{"url": "https://news.example/q"}])
    run.wait(timeout_s=60)
    far.script("/summarize", Reply(200, {}))
    fetches = len(far.hits("/summarize"))
    (result,) = fleet.dlq.requeue(run_id=run.id)
    assert result.action == "requeued"
    wait_until(lambda: run.summary().succeeded == 1, 60, "the requeued step and its dependent")
    (outcome,) = run.outcomes()
    assert outcome.ok and set(outcome.steps.values()) == {"succeeded"}
    assert len(far.hits("/summarize")) == fetches + 1, "only the failed step ran again"
    assert run.summary().steps["report"] == {"succeeded": 1, "failed": 0, "skipped": 0}


def test_runs_show_counts_items_per_step(fleet: Fleet, redis_url: str) -> None:
    run = fleet.graph(GRAPH, [{"url": f"https://blog.example/{i}"} for i in range(2)])
    run.wait(timeout_s=60)
    env = {
        **os.environ,
        "AGENTFLEET_BROKER_URL": redis_url,
        "AGENTFLEET_KEY_PREFIX": fleet.settings.key_prefix,
        "COLUMNS": "160",
    }
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", "runs", "show", run.id],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if "summarize" in line or "report" in line]
    assert ["│", "summarize", "│", "2", "│", "0", "│", "0", "│"] in rows


# Compensations -----------------------------------------------------------------------------


def test_a_run_that_fails_fast_undoes_its_successes_newest_first(fleet: Fleet, far: ScriptedServer) -> None:
    for n in range(4):
        far.script(f"/undo/{n}", Reply(200, {}))
    inputs = [{"n": n, "sleep_s": 0.3 * n} for n in range(4)] + [{"n": 4, "sleep_s": 1.5, "fail": True}]
    run = fleet.map(dt.book, inputs, fail_fast=True)
    run.wait(timeout_s=60)
    _compensated(run)
    summary = run.summary()
    assert (summary.succeeded, summary.failed, summary.compensated) == (4, 1, 4)
    assert _undone(far, range(4)) == [3, 2, 1, 0]


def test_a_compensation_runs_once_when_its_message_comes_twice(fleet: Fleet, far: ScriptedServer) -> None:
    for n in range(20, 23):
        far.script(f"/undo/{n}", Reply(200, {}, delay_s=0.5))
    run = fleet.map(dt.book, [{"n": n} for n in range(20, 23)])
    run.wait(timeout_s=60)
    assert run.compensate()
    compensation_signature(fleet.app, run.id, fleet.settings.queues.fanin).apply_async()
    _compensated(run)
    assert sorted(_undone(far, range(20, 23))) == [20, 21, 22], "each booking undone once"
    assert run.compensate() is False, "a run is told to compensate once"


def test_a_failing_compensation_is_dead_lettered_in_its_own_category_and_requeued(
    fleet: Fleet, far: ScriptedServer
) -> None:
    far.script("/undo/10", Reply(200, {}))
    far.script("/undo/11", Reply(400, {"error": "unknown booking"}), Reply(200, {}))
    run = fleet.map(dt.book, [{"n": 10}, {"n": 11}])
    run.wait(timeout_s=60)
    run.compensate()
    _compensated(run)
    assert (run.summary().compensated, run.summary().compensations_failed) == (1, 1)
    (entry,) = fleet.dlq.list(run_id=run.id, category="compensation")
    assert (entry.error_type, entry.task_name) == ("CompensationFailed", dt.book.name)
    (result,) = fleet.dlq.requeue(ids=[entry.id])
    assert result.action == "requeued"
    wait_until(lambda: run.summary().compensated == 2, 60, "the requeued compensation")
    assert run.summary().compensations_failed == 0
    assert fleet.dlq.list(run_id=run.id) == []


def test_a_cancelled_run_undoes_the_items_that_finish_after_the_cancel(
    fleet: Fleet, far: ScriptedServer
) -> None:
    for n in range(30, 40):
        far.script(f"/undo/{n}", Reply(200, {}))
    run = fleet.map(dt.book, [{"n": n, "sleep_s": 1.5} for n in range(30, 40)])
    keys = [key for _, key, _ in fleet.store.items(run.id).values()]
    wait_until(lambda: fleet.store.live_claims(keys).count(True) == 4, 30, "four bookings under way")
    run.cancel()
    summary = run.wait(timeout_s=60)
    _compensated(run)
    assert (summary.succeeded, summary.cancelled) == (4, 6), summary
    assert len(_undone(far, range(30, 40))) == 4 and run.summary().compensated == 4


# Batches -----------------------------------------------------------------------------------


def _succeeded(cluster: LocalCluster, task_id: str) -> str | None:
    """Celery's "succeeded" log line of task ``task_id`` (with its return value), if written yet."""
    for worker in cluster.workers:
        for line in worker.log_text().splitlines():
            if f"[{task_id}] succeeded in" in line:
                return line
    return None


def test_a_batched_map_gives_each_item_its_own_outcome(fleet: Fleet, wcluster: LocalCluster) -> None:
    run = fleet.map(tt.echo, [{"n": n} for n in range(25)], batch_size=10)
    summary = run.wait(timeout_s=60)
    assert summary.succeeded == 25
    outcomes = run.outcomes()
    assert [o.result for o in outcomes] == [{"n": n} for n in range(25)]
    assert [o.task_id for o in outcomes] == [f"{run.id}-{n}" for n in range(25)]
    # Celery logs a task's success just after the outcomes it recorded: three tasks ran.
    batches = [f"{run.id}-b{first}" for first in (0, 10, 20)]
    wait_until(lambda: all(_succeeded(wcluster, b) for b in batches), 30, "the three batches' successes")


def test_an_item_of_a_batch_retries_and_dead_letters_alone(fleet: Fleet) -> None:
    inputs = [{"n": n, "fail": n == 3} for n in range(6)]
    failing = fleet.map(tt.maybe_fail, inputs, batch_size=6)
    summary = failing.wait(timeout_s=60)
    assert (summary.succeeded, summary.failed, summary.dead_lettered) == (5, 1, 1)
    (entry,) = fleet.dlq.list(run_id=failing.id)
    assert entry.task_id == f"{failing.id}-3"
    retried = fleet.map(dt.draw_then_fail, [{"token": f"b{n}"} for n in range(3)], batch_size=3)
    assert retried.wait(timeout_s=60).succeeded == 3
    assert [o.attempts for o in retried.outcomes()] == [2, 2, 2]


def test_a_batch_delivered_twice_runs_each_item_once(fleet: Fleet, effects: Effects) -> None:
    inputs = [{"token": f"dup-batch-{n}", "sleep_s": 0.2} for n in range(8)]
    run = fleet.map(tt.effect, inputs, batch_size=4)
    metas = [
        ItemMeta(run=run.id, idx=i, key=key, item=item)
        for i, (_, key, item) in sorted(fleet.store.items(run.id).items())
    ]
    for sig in batch_signatures(
        fleet.app,
        task=tt.effect.name,
        queue=fleet.settings.queues.agents,
        metas=metas,
        inputs=inputs,
        size=4,
        countdowns=[0.0, 0.0],
    ):
        sig.apply_async()
    assert run.wait(timeout_s=60).succeeded == 8
    executions = effects.executions()
    assert [executions[f"dup-batch-{n}"] for n in range(8)] == [1] * 8


def test_a_batch_near_its_soft_time_limit_hands_its_last_items_off(
    fleet: Fleet, wcluster: LocalCluster
) -> None:
    run = fleet.map(dt.nap, [{"n": n, "sleep_s": 0.6} for n in range(5)], batch_size=5)
    assert run.wait(timeout_s=60).succeeded == 5
    # The batch's return value (in Celery's log line) holds the outcomes of the items it ran.
    wait_until(lambda: _succeeded(wcluster, f"{run.id}-b0"), 30, "the batch's success")
    line = _succeeded(wcluster, f"{run.id}-b0") or ""
    ran_in_batch = [int(i) for i in re.findall(r"'index': (\d+)", line.split("succeeded in", 1)[1])]
    assert ran_in_batch == [0, 1], "two items fit in 1.5 s, the rest went alone"
    alone = [f"{run.id}-{n}" for n in (2, 3, 4)]
    wait_until(lambda: all(_succeeded(wcluster, a) for a in alone), 30, "the items sent alone")
