"""Claims that fence under real network partitions.

Worker A runs in a network namespace of the test's own and reaches Redis only over a veth
pair (``netns_support.Link``); worker B, the client and Redis are on the host. The link is
cut for longer than a claim (the host end set down, or every packet dropped silently), made
to flap, or cut while a run's last outcome is on its way. Counted at the far end: the
``paced`` task writes each body execution's start, end or stop (with the worker's node) to a
file, Redis holds what was stored, Flower's own state holds what the workers reported, and
the workers' logs hold their warnings.

Skipped, with the reason, only where namespaces cannot be made (not root, no ``ip netns``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import fleet_test_tasks as tt
import pytest
from event_tap import EventTap
from fault_support import Effects, fault_cluster, outcome_events, wait_until
from netns_support import Link, partition_unavailable, silent_drop_unavailable, stop_process

from agentfleet import LocalCluster
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.local import WorkerProcess

pytestmark = pytest.mark.slow

TESTS_DIR = Path(__file__).parent
# Claims lapse 3 s after A is cut off; B's reconciler sends an item again 2 s after it finds
# it with no outcome, no claim and no message.
TAKEOVER = {"claim_ttl_s": 3.0, "reconcile_interval_s": 1.0, "reconcile_grace_s": 2.0}
# Claims outlive every cut of the flapping link (1.5 s) with room to spare.
STEADY = {"claim_ttl_s": 6.0, "reconcile_interval_s": 1.0, "reconcile_grace_s": 2.0}
REFUSED = "this outcome was not stored"
LAPSED = "lapsed before its renewal"


@pytest.fixture
def link() -> Iterator[Link]:
    why = partition_unavailable()
    if why is not None:
        pytest.skip(why)
    made = Link()
    try:
        yield made.create()
    finally:
        made.delete()


@pytest.fixture
def server(link: Link) -> Iterator[EmbeddedRedis]:
    """A Redis for this test, listening on loopback and on the host end of the link."""
    redis_server = EmbeddedRedis(args=["--bind", "127.0.0.1", link.host_ip, "--protected-mode", "no"])
    redis_server.start()
    try:
        yield redis_server
    finally:
        redis_server.stop()


@pytest.fixture
def effects(tmp_path: Path) -> Effects:
    return Effects(tmp_path / "effects")


@contextmanager
def cut_off_cluster(
    server: EmbeddedRedis, link: Link, effects: Effects, tmp_path: Path, delivery: Mapping[str, float]
) -> Iterator[tuple[LocalCluster, WorkerProcess]]:
    """A cluster with no host worker yet, and worker A in the namespace (concurrency 4)."""
    with fault_cluster(server.url, effects, workers=0, concurrency=8, delivery=delivery) as cluster:
        name = f"nsA-{uuid.uuid4().hex[:6]}@{os.uname().nodename}"
        env = cluster.worker_env()
        env["AGENTFLEET_BROKER_URL"] = f"redis://{link.host_ip}:{server.port}/0"
        args = [
            sys.executable, "-m", "celery", "-A", "agentfleet.celery_app", "worker",
            "--hostname", name, "--pool", "threads", "--concurrency", "4",
            "--queues", ",".join(cluster.queues), "--loglevel", "INFO",
            "--without-gossip", "--without-mingle", "--task-events",
        ]  # fmt: skip
        log_path = tmp_path / "worker-a.log"
        worker = WorkerProcess(name=name, process=link.popen(args, env=env, log=log_path), log_path=log_path)
        try:
            cluster.wait_ready([worker])
            yield cluster, worker
        finally:
            stop_process(worker.process)


def lines(effects: Effects, event: str, node: str = "") -> list[list[str]]:
    """The ``paced`` events ``[event, token, node, epoch seconds]`` of ``event`` (on ``node``)."""
    path = effects.root / "paced"
    found = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    return [f for f in found if f[0] == event and f[2].startswith(node)]


def tokens(effects: Effects, event: str, node: str = "") -> list[str]:
    return sorted(f[1] for f in lines(effects, event, node))


def cut(link: Link, fault: str) -> None:
    link.down() if fault == "down" else link.drop_silently()


def mend(link: Link, fault: str) -> None:
    link.up() if fault == "down" else link.restore()


@pytest.mark.parametrize("fault", ["down", "silent"])
def test_a_worker_cut_off_for_longer_than_its_claims_is_fenced(
    fault: str, server: EmbeddedRedis, link: Link, effects: Effects, tmp_path: Path
) -> None:
    if fault == "silent" and (why := silent_drop_unavailable()):
        pytest.skip(why)
    # Items 0 and 2 ask for their claim between slices of work; 1 and 3 make no fleet call, and
    # last long enough that B still runs them when A's outcomes reach Redis.
    inputs = [{"token": f"p{i}", "sleep_s": 12.0 - 4.0 * (i % 2 == 0), "check": i % 2 == 0} for i in range(4)]
    with cut_off_cluster(server, link, effects, tmp_path, TAKEOVER) as (cluster, worker_a):
        fleet = cluster.fleet()
        with EventTap(fleet.app) as tap:
            run = fleet.map(tt.paced, inputs)
            wait_until(lambda: len(lines(effects, "start", "nsA")) == 4, 60, "A to start every body")
            cut_at = time.time()
            cut(link, fault)
            try:
                worker_b = cluster.add_worker()
                node_b = worker_b.name.split("@")[0]
                # The link stays cut until B holds every item: far longer than a claim.
                wait_until(lambda: len(lines(effects, "start", node_b)) == 4, 90, "B to take every item over")
            finally:
                mend(link, fault)
            mended_at = time.time()
            summary = run.wait(timeout_s=120)
            store = fleet.store
            items = store.items(run.id)
            ids = {task_id for task_id, _, _ in items.values()}
            wait_until(lambda: {t for t, _ in tap.results_of(ids)} == ids, 60, "every task-succeeded event")
            time.sleep(1.0)  # events of the copies that came back late
            reported = tap.results_of(ids)
        log_a = worker_a.log_text()
        stops = [float(f[3]) - cut_at for f in lines(effects, "stopped", "nsA")]
        print(
            f"[{fault}] cut for {mended_at - cut_at:.1f} s; B ran again "
            f"{len(tokens(effects, 'start', node_b))} items; A stopped {len(stops)} "
            f"(the last {max(stops, default=-1.0):.1f} s after the cut), ran to the end "
            f"{len(tokens(effects, 'end', 'nsA'))}; outcomes refused {log_a.count(REFUSED)}; "
            f"lapsed warnings {log_a.count(LAPSED)}; success events {len(reported)}"
        )
        assert (summary.tasks_total, summary.succeeded, summary.failed) == (4, 4, 0)
        assert outcome_events(run) == {i: 1 for i in range(4)}
        stored = store.stored_outcomes([key for _, key, _ in items.values()])
        assert [o.result["node"] if o and o.result else None for o in stored] == [node_b] * 4
        # A's bodies that ask for their claim stopped within about a claim's TTL of the cut.
        stopped = lines(effects, "stopped", "nsA")
        assert sorted(f[1] for f in stopped) == ["p0", "p2"]
        assert all(float(f[3]) - cut_at < TAKEOVER["claim_ttl_s"] + 3.0 for f in stopped)
        # Those that made no fleet call ran to their end; their outcomes were refused.
        assert tokens(effects, "end", "nsA") == ["p1", "p3"]
        assert log_a.count(REFUSED) == 2
        # Every copy reported to Flower the outcome that stands: B's.
        assert reported and all(f"'node': '{node_b}'" in result for _, result in reported)


def test_a_flapping_link_runs_each_item_once_without_false_alarms(
    server: EmbeddedRedis, link: Link, effects: Effects, tmp_path: Path
) -> None:
    inputs = [{"token": f"f{i}", "sleep_s": 1.0} for i in range(24)]
    with cut_off_cluster(server, link, effects, tmp_path, STEADY) as (cluster, worker_a):
        fleet = cluster.fleet()
        stop = threading.Event()
        cuts: list[float] = []

        def flap() -> None:
            while not stop.is_set():
                link.down()
                cuts.append(time.time())
                stop.wait(1.5)
                link.up()
                stop.wait(2.5)

        run = fleet.map(tt.paced, inputs)
        flapper = threading.Thread(target=flap, daemon=True)
        flapper.start()
        try:
            summary = run.wait(timeout_s=120)
        finally:
            stop.set()
            flapper.join(timeout=10)
            link.up()
        log_a = worker_a.log_text()
        print(
            f"cut {len(cuts)} times; executions {len(lines(effects, 'start'))} for 24 items; "
            f"lapsed warnings {log_a.count(LAPSED)}; could-not-renew warnings "
            f"{log_a.count('could not renew')}; outcomes refused {log_a.count(REFUSED)}"
        )
        assert len(cuts) >= 2, "the link was cut while the run went on"
        assert (summary.succeeded, summary.failed, summary.recovered) == (24, 0, 0)
        assert outcome_events(run) == {i: 1 for i in range(24)}
        assert tokens(effects, "start") == sorted(f"f{i}" for i in range(24)), "each body ran once"
        assert log_a.count(LAPSED) == 0, "no claim was lost, so none is said to be"
        assert log_a.count(REFUSED) == 0


def test_a_run_ends_when_its_last_outcome_is_stored(
    server: EmbeddedRedis, link: Link, effects: Effects, tmp_path: Path
) -> None:
    with cut_off_cluster(server, link, effects, tmp_path, STEADY) as (cluster, _):
        fleet = cluster.fleet()
        run = fleet.map(tt.paced, [{"token": "last", "sleep_s": 2.0}])
        wait_until(lambda: lines(effects, "start"), 60, "the body to start")
        link.down()
        try:
            # The body ends while the link is down; its claim (6 s) outlives the cut.
            wait_until(lambda: lines(effects, "end"), 30, "the body to end")
            time.sleep(2.0)
        finally:
            link.up()
        mended_at = time.time()
        summary = run.wait(timeout_s=60)
        body_ended_at = float(lines(effects, "end")[0][3])
        print(f"body ended {mended_at - body_ended_at:.1f} s before the link came back")
        assert summary.succeeded == 1 and summary.ended_at is not None
        assert summary.ended_at >= mended_at - 0.05, "the run ended when its outcome was stored"
        assert summary.wall_clock_s >= mended_at - summary.created_at - 0.05


def test_redis_calls_on_a_silent_link_fail_within_their_timeouts(
    server: EmbeddedRedis, link: Link, tmp_path: Path
) -> None:
    why = silent_drop_unavailable()
    if why is not None:
        pytest.skip(why)
    go = tmp_path / "go"
    env = {
        **os.environ,
        "AGENTFLEET_BROKER_URL": f"redis://{link.host_ip}:{server.port}/0",
        "AGENTFLEET_KEY_PREFIX": f"probe{uuid.uuid4().hex[:6]}",
    }
    env.pop("AGENTFLEET_RESULT_BACKEND", None)
    probe = link.popen([sys.executable, str(TESTS_DIR / "netns_probe.py"), str(go)], env=env)
    assert probe.stdout is not None
    try:
        assert probe.stdout.readline().strip() == b"ready"
        link.drop_silently()
        go.touch()
        out, _ = probe.communicate(timeout=120)
    finally:
        stop_process(probe)
    found = json.loads(out.decode().strip().splitlines()[-1])
    print(f"on a silent link: state calls {found['state']}, a publish {found['publish']}")
    # The default bounds: a reply 5 s (delivery.redis_timeout_s), a connection 3 s.
    for seconds, error in found["state"]:
        assert error in ("TimeoutError", "ConnectionError") and seconds < 5.0 + 1.0
    seconds, error = found["publish"]
    assert error and seconds < 30.0
