"""Fair sharing: how soon a small run's first result comes, alone and behind a 10,000-item run.

One embedded Redis and 2 agentfleet workers of 50 threads. A small interactive run (5 items
of 1 s) is dispatched:

- alone, on idle workers;
- right after a big run of 10,000 items (``--big-seconds`` each), both at their default
  priorities (a run of at most ``dispatch.small_run_items`` items goes first);
- right after the same big run with the small run at the big run's priority: what it waits
  without fair sharing (behind every queued item of the big run).

Prints the seconds from the small run's dispatch to its first outcome, median of ``--rounds``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from agentfleet.config import load_settings
from agentfleet.local import LocalCluster
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.priority import RUN_PRIORITY

TASK = "agentfleet.simulated_agent"


def first_result_s(fleet: Fleet, priority: int | None) -> float:
    started = time.perf_counter()
    run = fleet.map(TASK, [{"item": i, "latency_s": 1.0} for i in range(5)], priority=priority)
    next(iter(run.as_completed(timeout_s=900)))
    took = time.perf_counter() - started
    run.wait(timeout_s=900)
    return took


def behind_big(fleet: Fleet, big: int, seconds: float, priority: int | None) -> float:
    backlog = fleet.map(TASK, [{"item": i, "latency_s": seconds} for i in range(big)])
    took = first_result_s(fleet, priority)
    backlog.cancel()  # the rest of the backlog would only delay the next measure
    backlog.wait(timeout_s=900)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big", type=int, default=10_000)
    parser.add_argument("--big-seconds", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with LocalCluster(
        workers=2, concurrency=50, pool="threads", settings=load_settings(), loglevel="WARNING"
    ) as cl:
        fleet = cl.fleet()
        found: dict[str, list[float]] = {"alone": [], "fair": [], "same": []}
        for _ in range(args.rounds):
            found["alone"].append(first_result_s(fleet, None))
            found["fair"].append(behind_big(fleet, args.big, args.big_seconds, None))
            found["same"].append(behind_big(fleet, args.big, args.big_seconds, RUN_PRIORITY))
    med = {k: statistics.median(v) for k, v in found.items()}
    print(f"# a 5-item run's first result, 2 workers x 50; median of {args.rounds} rounds")
    print(f"alone, on idle workers                                 {med['alone']:7.2f} s")
    print(
        f"behind {args.big:,} items of {args.big_seconds} s, default priorities         {med['fair']:7.2f} s"
    )
    print(f"behind them at the big run's priority (no fair sharing) {med['same']:7.2f} s")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
