"""Fan-out overhead: agentfleet against asyncio.gather (the ideal) and a plain Celery group.

One run, one embedded Redis, side by side:

- 1,000 tasks of 1 s simulated I/O at a total concurrency of 100 (2 worker processes, thread
  pool, 50 threads each): asyncio.gather with a semaphore, a Celery group of a sleep task,
  ``Fleet.map`` of ``simulated_agent``.
- 2,000 no-op tasks: a Celery group against ``Fleet.map``.
- Fan-in latency: seconds from a chord's last header task finishing to its callback starting.

Prints wall-clock ratios; targets are 1.05x the ideal for the I/O fan-out, at least 0.8x plain
Celery's no-op throughput, and a fan-in p50 under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from celery import group

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from agentfleet.celery_config import make_app  # noqa: E402
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


def plain_celery(cluster: LocalCluster, name: str, tasks: int, args: tuple[object, ...]) -> float:
    app = make_app(cluster.fleet().settings.model_copy(update={"broker_url": cluster.broker_url}))
    started = time.perf_counter()
    result = group(app.signature(name, args=args) for _ in range(tasks)).apply_async()
    result.get(timeout=600, propagate=True)
    elapsed = time.perf_counter() - started
    result.forget()
    app.close()
    return elapsed


def fleet_map(cluster: LocalCluster, tasks: int, latency_s: float) -> float:
    fleet = cluster.fleet()
    started = time.perf_counter()
    run = fleet.map("agentfleet.simulated_agent", [{"item": i, "latency_s": latency_s} for i in range(tasks)])
    summary = run.wait(timeout_s=600)
    elapsed = time.perf_counter() - started
    assert summary.succeeded == tasks, summary
    return elapsed


def fan_in_latencies(cluster: LocalCluster, chords: int, width: int) -> list[float]:
    fleet = cluster.fleet()
    found = []
    for _ in range(chords):
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
    parser.add_argument("--noop-tasks", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=100, help="total, over 2 workers")
    args = parser.parse_args()

    env = {"AGENTFLEET_TASK_MODULES": "bench_tasks", "PYTHONPATH": str(HERE)}
    os.environ.update(env)
    per_worker = args.concurrency // 2
    with LocalCluster(
        workers=2, concurrency=per_worker, pool="threads", env=env, loglevel="WARNING"
    ) as cluster:
        print(
            f"# {args.tasks} tasks x {args.seconds} s at concurrency {args.concurrency} (2 workers, threads)"
        )
        t_ideal = ideal(args.tasks, args.concurrency, args.seconds)
        t_celery = plain_celery(cluster, "bench.sleep", args.tasks, (args.seconds,))
        t_fleet = fleet_map(cluster, args.tasks, args.seconds)
        print(f"asyncio.gather (ideal)  {t_ideal:7.2f} s")
        print(f"celery group            {t_celery:7.2f} s   {t_celery / t_ideal:5.3f}x ideal")
        print(
            f"Fleet.map               {t_fleet:7.2f} s   {t_fleet / t_ideal:5.3f}x ideal   "
            f"{t_fleet / t_celery:5.3f}x celery   (target <= 1.05x ideal)"
        )

        print(f"\n# {args.noop_tasks} no-op tasks")
        n_celery = plain_celery(cluster, "bench.noop", args.noop_tasks, ())
        n_fleet = fleet_map(cluster, args.noop_tasks, 0.0)
        print(f"celery group            {n_celery:7.2f} s   {args.noop_tasks / n_celery:8.0f} tasks/s")
        print(
            f"Fleet.map               {n_fleet:7.2f} s   {args.noop_tasks / n_fleet:8.0f} tasks/s   "
            f"throughput {n_celery / n_fleet:5.3f}x celery   (target >= 0.8x)"
        )

        print("\n# fan-in latency: last header task done -> chord callback start (20 chords of 50)")
        lat = sorted(fan_in_latencies(cluster, 20, 50))
        p50 = statistics.median(lat) * 1000
        p90 = lat[int(len(lat) * 0.9) - 1] * 1000
        print(f"p50 {p50:6.1f} ms   p90 {p90:6.1f} ms   max {lat[-1] * 1000:6.1f} ms   (target p50 < 50 ms)")


if __name__ == "__main__":
    main()
