"""The hot path: what one no-op item costs agentfleet against plain Celery with its result backend.

One embedded Redis; one agentfleet worker and one plain Celery worker (``plain_app``), both a
thread pool of 8, both started before the first round. In alternating rounds, each side runs
``--tasks`` no-op items: ``Fleet.map`` of ``agentfleet.simulated_agent`` (no sleep) followed
with ``Run.wait``, against a Celery group of ``plain.noop`` followed with ``GroupResult.get``.
Per round and side: items per second (dispatch to last result), the worker's CPU per item
(its process tree), and Redis's own CPU per item and commands per item (``INFO``; commands a
script runs count too). Prints each side's median and agentfleet's ratio to Celery's, and the
no-op items per second one Redis could carry at 100% of its core (1 / Redis CPU per item).

Targets (see the README): throughput at least 1.0x Celery's; Redis CPU per item at most 1.0x.

``--tracing``: instead, what OpenTelemetry traces cost a no-op item, on against off
(``bench/trace_overhead.py``; needs the ``otel`` extra).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis
from celery import group

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _plain import PlainWorkers  # noqa: E402
from _probes import RedisUse, cpu_s  # noqa: E402

from agentfleet.config import load_settings  # noqa: E402
from agentfleet.embedded_redis import EmbeddedRedis  # noqa: E402
from agentfleet.local import LocalCluster  # noqa: E402


def _round(run: Any, client: redis.Redis, worker_pid: int, tasks: int) -> dict[str, float]:
    before, cpu0, started = RedisUse.read(client), cpu_s(worker_pid), time.perf_counter()
    run()
    wall = time.perf_counter() - started
    used = RedisUse.read(client).since(before)
    return {
        "per_s": tasks / wall,
        "worker_ms": 1000 * (cpu_s(worker_pid) - cpu0) / tasks,
        "redis_ms": 1000 * used.cpu_s / tasks,
        "commands": sum(used.calls.values()) / tasks,
        **{f"cmd:{name}": n / tasks for name, n in used.calls.items()},
        **{f"us:{name}": n / tasks for name, n in used.usec.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--by-command", action="store_true", help="print commands per item by name")
    parser.add_argument("--tracing", action="store_true", help="traces on against off, not against Celery")
    args = parser.parse_args()
    if args.tracing:
        from trace_overhead import compare

        compare(args.tasks, args.rounds)
        return
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        settings = load_settings(broker_url=server.url)
        with (
            LocalCluster(workers=1, concurrency=8, pool="threads", broker_url=server.url, settings=settings,
                         loglevel="WARNING") as cluster,
            PlainWorkers(server.url, count=1, pool="threads", concurrency=8) as plain,
        ):  # fmt: skip
            fleet, celery = cluster.fleet(), plain.app

            def fleet_side() -> None:
                run = fleet.map(
                    "agentfleet.simulated_agent", [{"item": i, "latency_s": 0.0} for i in range(args.tasks)]
                )
                assert run.wait(timeout_s=600).succeeded == args.tasks

            def celery_side() -> None:
                result = group(celery.signature("plain.noop") for _ in range(args.tasks)).apply_async()
                result.get(timeout=600)
                result.forget()

            fleet_side(), celery_side()  # warm both up
            sides: dict[str, list[dict[str, float]]] = {"agentfleet": [], "celery": []}
            for _ in range(args.rounds):
                sides["celery"].append(_round(celery_side, client, plain.pids[0], args.tasks))
                sides["agentfleet"].append(_round(fleet_side, client, cluster.workers[0].pid, args.tasks))
    med = {
        side: {k: statistics.median(r.get(k, 0.0) for r in rows) for k in set().union(*rows)}
        for side, rows in sides.items()
    }
    ours, theirs = med["agentfleet"], med["celery"]
    print(f"# {args.tasks} no-op items, 1 worker of 8 threads a side, median of {args.rounds} rounds")
    print(f"{'':34s}{'agentfleet':>12s}{'plain Celery':>14s}{'ratio':>8s}")
    rows = (
        ("items per second", "per_s", "{:12.0f}", "(target >= 1.0x)"),
        ("worker CPU per item (ms)", "worker_ms", "{:12.3f}", ""),
        ("Redis CPU per item (ms)", "redis_ms", "{:12.3f}", "(target <= 1.0x)"),
        ("Redis commands per item", "commands", "{:12.1f}", ""),
    )
    for label, key, fmt, target in rows:
        ratio = ours[key] / theirs[key]
        print(f"{label:34s}{fmt.format(ours[key])}{fmt.format(theirs[key]):>14s}{ratio:7.2f}x {target}")
    # Redis runs commands on one core: its CPU per item bounds the items one Redis carries.
    carried = (1000 / ours["redis_ms"], 1000 / theirs["redis_ms"])
    print(f"{'items/s one busy Redis core carries':34s}{carried[0]:12.0f}{carried[1]:14.0f}")
    if args.by_command:
        names = sorted({k for side in med.values() for k in side if k.startswith("cmd:")})
        print(f"{'  commands per item (microseconds)':34s}")
        for name in names:
            us = "us:" + name[4:]
            mine = f"{ours.get(name, 0.0):6.2f} ({ours.get(us, 0.0):5.1f})"
            print(f"  {name[4:]:32s}{mine}{theirs.get(name, 0.0):7.2f} ({theirs.get(us, 0.0):5.1f})")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
