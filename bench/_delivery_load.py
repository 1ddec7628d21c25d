"""One side of the claims-overhead comparison, run in a process of its own.

``bench/delivery.py`` runs this script twice per round, once with the package of a baseline git
revision first on ``PYTHONPATH`` and once with this tree, so both sides use only what both
versions have: ``LocalCluster``, ``Fleet.map`` and the built-in ``simulated_agent``. Prints one
JSON line: the wall-clock seconds of the I/O fan-out and of the no-op run.
"""

from __future__ import annotations

import argparse
import json
import time

from agentfleet.local import LocalCluster


def timed_map(cluster: LocalCluster, tasks: int, latency_s: float) -> float:
    fleet = cluster.fleet()
    started = time.perf_counter()
    run = fleet.map("agentfleet.simulated_agent", [{"item": i, "latency_s": latency_s} for i in range(tasks)])
    summary = run.wait(timeout_s=900)
    elapsed = time.perf_counter() - started
    assert summary.succeeded == tasks, summary
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--noop-tasks", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=100, help="total, over 2 workers")
    args = parser.parse_args()
    with LocalCluster(
        workers=2, concurrency=args.concurrency // 2, pool="threads", loglevel="WARNING"
    ) as cluster:
        timed_map(cluster, 50, 0.0)  # warm both workers up
        io_s = timed_map(cluster, args.tasks, args.seconds)
        noop_s = timed_map(cluster, args.noop_tasks, 0.0)
    print(json.dumps({"io_s": io_s, "noop_s": noop_s}))


if __name__ == "__main__":
    main()
