"""The console's workers page, run timelines and fleet charts against real workers.

Two worker processes (a thread pool of 4 each) on the session's Redis, with a heartbeat every
half second; the service is ``create_app`` in this process, read with the bearer token. The
oracles are what the workers themselves report (their pid in each result) and what the
registry holds, not the console's own figures.
"""

from __future__ import annotations

import re
import socket
import uuid
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import fleet_test_tasks as tt
import pytest
from fault_support import Effects, fault_cluster, tokens, wait_until
from ops_support import wait_for
from starlette.testclient import TestClient
from worker_env import cluster_env, own_queues

from agentfleet import LocalCluster
from agentfleet.config import Settings, load_settings
from agentfleet.runs import FleetHistory
from agentfleet.service import create_app

pytestmark = pytest.mark.slow

TOKEN = "console-integration-" + "0" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLOTS = 4


@pytest.fixture(scope="module")
def settings(redis_url: str) -> Settings:
    prefix = f"ci{uuid.uuid4().hex[:8]}"
    return load_settings(
        broker_url=redis_url,
        key_prefix=prefix,
        queues=own_queues(prefix),
        service={"token": TOKEN},
        worker={"heartbeat_s": 0.5},
    )


@pytest.fixture(scope="module")
def cluster(settings: Settings) -> Iterator[LocalCluster]:
    env = cluster_env(
        AGENTFLEET_TASK_MODULES="console_test_tasks,fleet_test_tasks",
        AGENTFLEET_WORKER__HEARTBEAT_S="0.5",
        AGENTFLEET_RETRY__BACKOFF_BASE_S="0.1",
        AGENTFLEET_RETRY__BACKOFF_CAP_S="0.2",
    )
    with LocalCluster(
        workers=2,
        concurrency=SLOTS,
        pool="threads",
        broker_url=settings.broker_url,
        env=env,
        settings=settings,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def client(settings: Settings, cluster: LocalCluster) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def test_the_workers_page_shows_each_workers_host_pool_slots_busy_and_memory(
    cluster: LocalCluster, client: TestClient
) -> None:
    tag = uuid.uuid4().hex[:8]
    run = cluster.fleet().map(
        "console_test_tasks.bumpy", [{"n": 4 * k, "tag": tag, "sleep_s": 3.0} for k in range(6)]
    )

    def busy_records() -> list | None:
        found = cluster.registry().live()
        return found if len(found) == 2 and sum(w.busy or 0 for w in found) >= 4 else None

    workers = wait_for(busy_records, timeout_s=30, what="heartbeats with busy slots")
    page = client.get("/console/workers", headers=AUTH)
    run.wait(timeout_s=60)
    assert page.status_code == 200
    for worker in workers:
        assert worker.pool == "threads" and worker.slots == SLOTS
        assert worker.host == socket.gethostname()
        assert worker.version == metadata.version("agentfleet")
        assert worker.rss_bytes is not None and worker.rss_bytes > 20 * 2**20
        assert worker.node in page.text
        shown = re.search(
            rf"{re.escape(worker.node)}.*?aria-label=\"(\d+) of (\d+) slots busy\"", page.text, re.DOTALL
        )
        assert shown is not None and int(shown.group(2)) == SLOTS
    assert "threads" in page.text and "MiB" in page.text


def _bumpy_run(cluster: LocalCluster, count: int) -> tuple[str, dict[int, dict]]:
    tag = uuid.uuid4().hex[:8]
    run = cluster.fleet().map(
        "console_test_tasks.bumpy", [{"n": n, "tag": tag, "sleep_s": 0.05} for n in range(count)]
    )
    outcomes = {o.index: o for o in run.as_completed(timeout_s=90)}
    assert len(outcomes) == count
    return run.id, {i: o.result for i, o in outcomes.items() if o.ok}


def test_a_runs_timeline_puts_every_attempt_on_the_lane_of_the_worker_that_ran_it(
    cluster: LocalCluster, client: TestClient
) -> None:
    run_id, results = _bumpy_run(cluster, 12)
    store = cluster.fleet().store
    log = store.spans(run_id)
    pids = {w.node: w.pid for w in cluster.registry().live()}
    assert set(log.lanes.values()) <= set(pids)
    assert {i: s.kind for i, s in log.finals.items()} == {n: "f" if n % 4 == 3 else "s" for n in range(12)}
    for index, result in results.items():
        final = log.finals[index]
        assert pids[log.worker(final.lane)] == result["pid"], "the lane of the worker that ran it"
        assert final.start_ms <= final.end_ms and final.duration_s >= 0.05
    retried = sorted(s.index for s in log.spans if s.kind == "r")
    deferred = sorted(s.index for s in log.spans if s.kind == "d")
    assert retried == [1, 5, 9] and deferred == [2, 6, 10]
    summary = store.summary(run_id)
    assert (summary.retries, summary.deferrals) == (3, 3)
    events = store.events_at(run_id, [log.finals[i].event for i in range(12)])
    assert sorted(int(fields["idx"]) for fields in events.values()) == list(range(12))

    page = client.get(f"/console/runs/{run_id}/timeline", headers=AUTH)
    assert page.status_code == 200
    assert all(node in page.text for node in log.lanes.values())
    bars = re.findall(r'<a href="/console/runs/[0-9a-f]+\?page=1#item-(\d+)"><rect class="k-(\w)"', page.text)
    assert sorted((int(i), k) for i, k in bars) == sorted((s.index, s.kind) for s in log.spans), (
        "a bar per attempt"
    )
    assert "retried" in page.text and "deferred" in page.text


def test_a_run_with_failures_never_looks_green_and_its_rate_counts_finished_items(
    cluster: LocalCluster, client: TestClient
) -> None:
    run_id, _ = _bumpy_run(cluster, 8)
    page = client.get(f"/console/runs/{run_id}", headers=AUTH).text
    assert "finished, 2 failed" in page and 'class="k-f"' in page
    assert "status-finished" not in page
    assert "75.0%" in page, "6 of the 8 that ran succeeded"
    listed = client.get("/console/runs", headers=AUTH).text
    row = listed[listed.index(run_id) - 400 : listed.index(run_id) + 1500]
    assert "finished, 2 failed" in row and 'data-label="Failed"' in row


def test_a_running_runs_success_rate_counts_only_its_finished_items(
    cluster: LocalCluster, client: TestClient
) -> None:
    tag = uuid.uuid4().hex[:8]
    inputs = [{"n": 4 * k, "tag": tag, "sleep_s": 0.2 if k < 4 else 3.0} for k in range(12)]
    run = cluster.fleet().map("console_test_tasks.bumpy", inputs)
    wait_for(lambda: run.summary().succeeded >= 4, timeout_s=30, what="the quick items")
    summary = run.summary()
    page = client.get(f"/console/runs/{run.id}", headers=AUTH).text
    run.wait(timeout_s=60)
    assert summary.status == "running" and summary.success_rate < 1
    assert "100.0%" in page and "status-running" in page


def test_pipeline_stages_appear_on_the_timeline_as_they_pass(cluster: LocalCluster) -> None:
    inputs = [{"url": f"https://example.test/{n}"} for n in range(3)]
    stages = [
        "fleet_test_tasks.stage_fetch",
        "fleet_test_tasks.stage_extract",
        "fleet_test_tasks.stage_report",
    ]
    run = cluster.fleet().pipeline(stages, inputs)
    assert run.wait(timeout_s=60).succeeded == 3
    log = cluster.fleet().store.spans(run.id)
    kinds = sorted((s.index, s.kind) for s in log.spans)
    assert kinds == sorted([(n, "p") for n in range(3)] * 2 + [(n, "s") for n in range(3)])
    assert all(s.lane >= 0 for s in log.spans)


def test_the_fleet_minutes_hold_what_the_workers_finished_and_saw(
    cluster: LocalCluster, settings: Settings, client: TestClient
) -> None:
    history = FleetHistory(cluster.fleet().store.client, prefix=settings.key_prefix)
    before = sum(m.count("retries") for m in history.minutes(5))
    _bumpy_run(cluster, 8)

    def counted() -> list | None:
        minutes = history.minutes(5)
        return minutes if sum(m.count("retries") for m in minutes) >= before + 2 else None

    minutes = wait_for(counted, timeout_s=20, what="the workers' counts in the fleet's minutes")
    assert sum(m.count("failed") for m in minutes) >= 2
    assert sum(m.count("deferrals") for m in minutes) >= 2
    assert sum(sum(m.item_times) for m in minutes) >= sum(m.finished for m in minutes) > 0
    now = wait_for(lambda: history.minutes(1)[0].slots and history.minutes(1)[0], timeout_s=10, what="gauges")
    assert now.slots == 2 * SLOTS and now.queued is not None and now.unacked is not None
    page = client.get("/console/runs", headers=AUTH).text
    assert "Items finished: peak" in page and "Queues and busy slots" in page


def test_after_a_sigkill_each_item_ends_once_on_a_live_lane_and_the_banner_says_when_none_is_left(
    redis_url: str, tmp_path: Path
) -> None:
    effects = Effects(tmp_path / "effects")
    with fault_cluster(redis_url, effects, workers=2, concurrency=4) as cluster:
        run = cluster.fleet().map(tt.effect, tokens("kill", 8, sleep_s=2.0))
        wait_until(lambda: len(effects.executions()) == 8, 30, "every item to start")
        victim, survivor = cluster.workers
        cluster.kill_worker(victim)
        summary = run.wait(timeout_s=120)
        log = cluster.fleet().store.spans(run.id)
        settings = load_settings(
            broker_url=cluster.broker_url,
            key_prefix=cluster.settings.key_prefix,
            queues=cluster.settings.queues.model_dump(),
            service={"token": TOKEN},
        )
        with TestClient(create_app(settings)) as client:
            wait_for(
                lambda: len(cluster.registry().live()) == 1, timeout_s=20, what="the killed worker to expire"
            )
            workers_page = client.get("/console/workers", headers=AUTH).text
            cluster.stop_worker(survivor)
            banner = client.get("/console/runs", headers=AUTH).text
    assert (summary.succeeded, summary.timed_out) == (8, 0)
    assert sorted(log.finals) == list(range(8)) and sum(s.final for s in log.spans) == 8
    assert {log.worker(s.lane) for s in log.finals.values()} <= {victim.name, survivor.name}
    rerun = [i for i, n in sorted(effects.executions().items()) if n > 1]
    assert all(log.worker(log.finals[int(t.rsplit("-", 1)[1])].lane) == survivor.name for t in rerun)
    assert survivor.name in workers_page and victim.name not in workers_page
    assert "No worker is running: none has a live heartbeat." in banner
