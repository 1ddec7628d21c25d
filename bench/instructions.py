"""Redis's instructions per item on the hot path, counted by callgrind: a figure load does not move.

CPU seconds on a shared machine move by 10-20 % from run to run, more than the few per cent a
change to a Lua script makes. Instructions do not: ``redis-server`` runs under valgrind's
callgrind, counting only while the measured run goes (``callgrind_control -i on`` / ``off``),
and two runs of one tree agree within about half a per cent. The work is the fleet side of
``bench/hot_path.py``: one agentfleet worker of 8 threads, ``Fleet.map`` of ``--tasks`` no-op
``agentfleet.simulated_agent`` items after a warm-up of 100, then ``Run.wait``. Everything Redis
does for them counts: commands, the Lua scripts, reading requests and writing replies; its idle
timer too, a few hundred instructions per item.

With ``--base REV`` it measures the base commit as well (checked out in a temporary git
worktree, removed at the end: this file runs there with the base's ``agentfleet`` on
``PYTHONPATH``) and prints this tree's count over the base's. Needs ``valgrind``
(``apt-get install valgrind``); Redis runs about 50 times slower under it, so a run of 2,000
items takes about a minute.

    .venv/bin/python bench/instructions.py [--tasks 2000] [--base eb59add]

``--worker`` counts the worker's instructions instead (Redis runs natively), with Celery's
solo pool (one thread runs the bodies, one message a look) or ``--worker threads`` (8 threads,
as ``bench/hot_path.py`` runs it: windows of messages taken at once). Valgrind runs one thread
at a time, so neither count holds what contention for the GIL costs on a real machine; the
reconciler's passes are spaced out beyond the run (``delivery.reconcile_interval_s``), as its
cost grows with the run's wall time, which valgrind stretches about 50 times. Two runs of one
tree agree within about half a per cent.

    .venv/bin/python bench/instructions.py --worker [threads] [--tasks 1000] [--base eb59add]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from compare import checked_out, this_commit

HERE = Path(__file__).resolve()
TREE = HERE.parent.parent
_TASK = "agentfleet.simulated_agent"


def _items(n: int) -> list[dict[str, object]]:
    return [{"item": i, "latency_s": 0.0} for i in range(n)]


def _instrument(pid: int, state: str) -> None:
    """Turn callgrind's counting in process ``pid`` on or off."""
    subprocess.run(["callgrind_control", "-i", state, str(pid)], check=True, capture_output=True)


def _measured_run(fleet: Any, pid: int, tasks: int) -> None:
    """A warm-up of 100 items, then ``tasks`` items counted by callgrind in process ``pid``."""
    fleet.map(_TASK, _items(100)).wait(timeout_s=900)
    time.sleep(1.0)
    _instrument(pid, "on")
    done = fleet.map(_TASK, _items(tasks)).wait(timeout_s=3600)
    _instrument(pid, "off")
    if done.succeeded != tasks:
        raise RuntimeError(f"{done.succeeded} of {tasks} items succeeded")


def _totals(work: Path) -> int:
    """The instructions callgrind counted, from the files it wrote under ``work`` (then removed)."""
    found = [re.search(r"^totals:\s+(\d+)", f.read_text(), re.MULTILINE) for f in work.glob("callgrind.out*")]
    shutil.rmtree(work, ignore_errors=True)
    counted = [int(t.group(1)) for t in found if t is not None]
    if not counted:
        raise RuntimeError("callgrind wrote no totals")
    return sum(counted)


def _count(tasks: int) -> float:
    """Redis's instructions per item of one measured run (this process's ``agentfleet``)."""
    import redis

    from agentfleet.config import load_settings
    from agentfleet.embedded_redis import free_port, redis_server_binary
    from agentfleet.local import LocalCluster

    work = Path(tempfile.mkdtemp(prefix="instructions-"))
    out, port = work / "callgrind.out", free_port()
    server = subprocess.Popen(
        [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(work),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("redis-server under valgrind did not start") from None
                time.sleep(0.2)
        settings = load_settings(broker_url=url)
        with LocalCluster(
            workers=1, concurrency=8, pool="threads", broker_url=url, settings=settings, loglevel="WARNING"
        ) as cluster:
            _measured_run(cluster.fleet(), server.pid, tasks)
    finally:
        with contextlib.suppress(redis.RedisError):
            client.shutdown(nosave=True)
        client.close()
        try:
            server.wait(timeout=300)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return _totals(work) / tasks


def _count_worker(tasks: int, pool: str) -> float:
    """The worker's instructions per item of one measured run (this process's ``agentfleet``),
    with Celery's ``pool`` (``solo``, or ``threads`` of 8)."""
    from agentfleet.local import LocalCluster, WorkerProcess

    work = Path(tempfile.mkdtemp(prefix="instructions-"))
    out = work / "callgrind.out"
    with LocalCluster(
        workers=0,
        pool=pool,
        loglevel="WARNING",
        startup_timeout_s=900,
        stop_timeout_s=600,
        env={"AGENTFLEET_DELIVERY__RECONCILE_INTERVAL_S": "3600"},
    ) as cluster:
        # The worker's command as ``LocalCluster.add_worker`` builds it, under valgrind: built here,
        # since the base commit's ``LocalCluster`` (which this file runs with) has no seam for it.
        name = f"counted-{os.getpid()}@{os.uname().nodename}"
        command = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            sys.executable, "-m", "celery", "-A", "agentfleet.celery_app", "worker", "--hostname", name,
            "--pool", pool, "--concurrency", "8", "--queues", ",".join(cluster.queues),
            "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--task-events",
        ]  # fmt: skip
        with open(work / "worker.log", "wb") as log_file:
            process = subprocess.Popen(
                command,
                env=cluster.worker_env(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProcess(name=name, process=process, log_path=work / "worker.log")
        cluster.workers.append(worker)  # stopped with the cluster, by its pid
        cluster.wait_ready([worker])
        _measured_run(cluster.fleet(), process.pid, tasks)
    return _totals(work) / tasks


def _measure(tree: Path, tasks: int, worker: str | None) -> float:
    """This file run as a child with ``tree``'s ``agentfleet``: its count per item (``worker``:
    the worker's, with that pool; None: Redis's)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    counted = ["--worker", worker] if worker else []
    done = subprocess.run(
        [sys.executable, str(HERE), "--child", "--tasks", str(tasks), *counted],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"^instructions per item ([\d.]+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the run on {tree} failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    return float(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--base", help="a commit to compare with (any git revision)")
    parser.add_argument(
        "--worker",
        nargs="?",
        const="solo",
        choices=("solo", "threads"),
        help="count the worker's instructions instead, with this pool (solo, or threads of 8)",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        counted = _count_worker(args.tasks, args.worker) if args.worker else _count(args.tasks)
        print(f"instructions per item {counted:.0f}")
        return 0
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        parser.error(f"needs {' and '.join(missing)} (apt-get install valgrind)")
    if args.worker:
        pool = "solo pool" if args.worker == "solo" else "8 threads"
        print(f"# the worker's instructions per item, {args.tasks} no-op items, 1 worker, {pool}")
    else:
        print(f"# Redis instructions per item, {args.tasks} no-op items, 1 worker of 8 threads")
    this = _measure(TREE, args.tasks, args.worker)
    print(f"this tree ({this_commit()}) {this:12.0f}")
    if args.base:
        with checked_out(args.base) as (commit, base):
            counted = _measure(base, args.tasks, args.worker)
        print(f"base {commit[:7]}      {counted:12.0f}")
        print(f"this tree / base   {this / counted:12.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
