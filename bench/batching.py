"""Batching: 10,000 short items through ``Fleet.map``, unbatched and with ``batch_size``.

Two worker processes of 8 threads run ``fleet_test_tasks.echo`` (no work: what is measured is
the fleet's own cost per item). Each side is timed from the first publish to the last outcome
(dispatch included), in alternating rounds on the same cluster; every item gets its own
outcome either way. Printed: seconds, items per second, and each batch size's throughput over
the unbatched baseline of the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from worker_env import cluster_env  # noqa: E402

from agentfleet.config import load_settings  # noqa: E402
from agentfleet.local import LocalCluster  # noqa: E402
from agentfleet.orchestration import Fleet  # noqa: E402


def timed(fleet: Fleet, tasks: int, batch_size: int | None) -> float:
    started = time.monotonic()
    run = fleet.map("fleet_test_tasks.echo", [{"n": n} for n in range(tasks)], batch_size=batch_size)
    summary = run.wait(timeout_s=1800)
    if summary.succeeded != tasks:
        raise SystemExit(f"only {summary.succeeded} of {tasks} items succeeded: {summary}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--sizes", type=int, nargs="*", default=[20, 100])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    sides: list[int | None] = [None, *args.sizes]
    seconds: dict[int | None, list[float]] = {side: [] for side in sides}
    with LocalCluster(
        workers=2,
        concurrency=8,
        pool="threads",
        env=cluster_env(),
        loglevel="WARNING",
        settings=load_settings(),
    ) as cluster:
        fleet = cluster.fleet()
        timed(fleet, 200, None)  # warm the workers up
        for _ in range(args.rounds):
            for side in sides:
                seconds[side].append(timed(fleet, args.tasks, side))
    base = statistics.median(seconds[None])
    print(f"# {args.tasks} no-op items, 2 workers x 8 threads; median of {args.rounds} rounds")
    print(f"{'batch_size':>10s} {'seconds':>9s} {'items/s':>9s} {'throughput':>11s}")
    for side in sides:
        mid = statistics.median(seconds[side])
        print(f"{side or 'none':>10} {mid:9.1f} {args.tasks / mid:9.0f} {base / mid:10.2f}x")


if __name__ == "__main__":
    main()
