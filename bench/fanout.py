"""Fan-out: 1,000 tasks of 1 s at concurrency 100, agentfleet against plain Celery and the ideal.

One embedded Redis. In each of ``--rounds`` rounds, in turn:

- the ideal: ``asyncio.gather`` of 1,000 sleeps of 1 s under a semaphore of 100, in this process;
- threads, 2 workers x 50: ``Fleet.map`` of ``agentfleet.simulated_agent`` (then ``Run.wait``)
  against a Celery group of ``plain.sleep`` on plain Celery workers (``plain_app``, one
  message reserved per slot) (then ``GroupResult.get``);
- gevent, 1 worker x 100: the same, and plain Celery reserving 4 messages per slot too.

Each configuration's workers are started for it and stopped after it. Prints the median wall
clock of each, over the ideal, and agentfleet's over plain Celery's. Then the fan-in latency:
from a run's last item recording its outcome to its aggregate starting (20 runs of 50 items).

Targets: threads at most 1.02x the ideal, gevent at most 1.05x; fan-in p50 under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from celery import group

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _plain import PlainWorkers  # noqa: E402

from agentfleet.config import load_settings  # noqa: E402
from agentfleet.embedded_redis import EmbeddedRedis  # noqa: E402
from agentfleet.local import LocalCluster  # noqa: E402


def ideal(tasks: int, concurrency: int, seconds: float) -> float:
    async def main() -> None:
        gate = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with gate:
                await asyncio.sleep(seconds)

        await asyncio.gather(*(one() for _ in range(tasks)))

    started = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - started


def fleet_run(url: str, pool: str, workers: int, slots: int, tasks: int, seconds: float) -> float:
    settings = load_settings(broker_url=url)
    with LocalCluster(
        workers=workers, concurrency=slots, pool=pool, broker_url=url, settings=settings, loglevel="WARNING"
    ) as cluster:
        fleet = cluster.fleet()
        fleet.map("agentfleet.simulated_agent", [{"latency_s": 0.0} for _ in range(workers * slots)]).wait(60)
        started = time.perf_counter()
        run = fleet.map(
            "agentfleet.simulated_agent", [{"item": i, "latency_s": seconds} for i in range(tasks)]
        )
        assert run.wait(timeout_s=600).succeeded == tasks
        return time.perf_counter() - started


def celery_run(
    url: str, pool: str, workers: int, slots: int, tasks: int, seconds: float, prefetch: int
) -> float:
    with PlainWorkers(url, count=workers, pool=pool, concurrency=slots, prefetch=prefetch) as plain:
        app = plain.app
        group(app.signature("plain.noop") for _ in range(workers * slots)).apply_async().get(timeout=60)
        started = time.perf_counter()
        result = group(app.signature("plain.sleep", args=(seconds,)) for _ in range(tasks)).apply_async()
        result.get(timeout=600)
        elapsed = time.perf_counter() - started
        result.forget()
        return elapsed


def fan_in_latencies(url: str, runs: int, width: int) -> list[float]:
    with LocalCluster(
        workers=1, concurrency=8, pool="threads", broker_url=url, loglevel="WARNING"
    ) as cluster:
        fleet = cluster.fleet()
        found = []
        for _ in range(runs):
            run = fleet.map(
                "agentfleet.simulated_agent",
                [{"item": i, "latency_s": 0.0} for i in range(width)],
                aggregate="agentfleet.merge:concat",
            )
            run.result(timeout_s=60)
            record = fleet.store.get_run(run.id)
            found.append(float(record["aggregate_started_at"]) - float(record["ended_at"]))
        return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n, s = args.tasks, args.seconds
    with EmbeddedRedis(args=["--maxclients", "10000"]) as server:
        url = server.url
        sides: dict[str, Callable[[], float]] = {
            "ideal (asyncio.gather, 100 at once)": lambda: ideal(n, 100, s),
            "plain Celery, threads 2 x 50": lambda: celery_run(url, "threads", 2, 50, n, s, 1),
            "agentfleet, threads 2 x 50": lambda: fleet_run(url, "threads", 2, 50, n, s),
            "plain Celery, gevent 1 x 100": lambda: celery_run(url, "gevent", 1, 100, n, s, 1),
            "plain Celery, gevent 1 x 100, prefetch 4": lambda: celery_run(url, "gevent", 1, 100, n, s, 4),
            "agentfleet, gevent 1 x 100": lambda: fleet_run(url, "gevent", 1, 100, n, s),
        }
        times: dict[str, list[float]] = {label: [] for label in sides}
        for _ in range(args.rounds):
            for label, side in sides.items():
                times[label].append(side())
        latencies = sorted(fan_in_latencies(url, 20, 50))
    med = {label: statistics.median(found) for label, found in times.items()}
    base = med["ideal (asyncio.gather, 100 at once)"]
    print(f"# {n} tasks x {s} s at concurrency 100; median of {args.rounds} alternating rounds")
    print(f"{'':44s}{'wall s':>8s}{'x ideal':>9s}")
    for label, value in med.items():
        print(f"{label:44s}{value:8.2f}{value / base:8.3f}x")
    threads = med["agentfleet, threads 2 x 50"] / med["plain Celery, threads 2 x 50"]
    gevent = med["agentfleet, gevent 1 x 100"] / med["plain Celery, gevent 1 x 100"]
    print(f"agentfleet over plain Celery: threads {threads:.3f}x, gevent {gevent:.3f}x")
    print("targets: threads <= 1.02x the ideal, gevent <= 1.05x")
    p50, p90 = statistics.median(latencies) * 1000, latencies[int(len(latencies) * 0.9) - 1] * 1000
    print("\n# fan-in latency, last outcome -> aggregate start (20 runs of 50)")
    print(f"p50 {p50:.1f} ms, p90 {p90:.1f} ms (target p50 < 50 ms)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
