"""Which worker pool should the agent worker run? Measure instead of guessing.

For each pool (threads, gevent, prefork) and pool size (50, 100, 200 by default) this starts
one real worker on an embedded Redis, fills every slot twice with I/O-bound 1-second tasks
(``agentfleet.simulated_agent``), and records:

- throughput: items finished per second, and that as a share of the ideal (pool size / 1 s);
- CPU: seconds of CPU the worker's process tree spent per item (the fleet's own overhead:
  run store scripts, Celery's message handling, events); one process cannot finish more than
  1 / (CPU per item) items a second however large its pool;
- memory: the proportional set size (PSS, MiB) of the worker's whole process tree when idle
  and at its busiest, and the busy total divided by the pool size (MiB per in-flight slot).

PSS counts a page shared by n processes as 1/n to each, so prefork's copy-on-write sharing is
not counted 200 times over. Results are printed as a table and written to
``bench/results/pool_choice.json``.

Run: ``.venv/bin/python bench/pool_choice.py [--sizes 50,100,200] [--pools threads,gevent,prefork]``
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

from _probes import cpu_s, pss_mib

from agentfleet.config import load_settings
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.local import LocalCluster

RESULTS = Path(__file__).parent / "results"


def measure(pool: str, size: int, redis_url: str, latency_s: float) -> dict[str, Any]:
    settings = load_settings(broker_url=redis_url, key_prefix=f"bench-{pool}-{size}")
    env = {"AGENTFLEET_KEY_PREFIX": settings.key_prefix}
    started = time.monotonic()
    with LocalCluster(
        workers=1,
        concurrency=size,
        pool=pool,
        broker_url=redis_url,
        env=env,
        settings=settings,
        loglevel="WARNING",
        startup_timeout_s=240,
    ) as cluster:
        startup_s = time.monotonic() - started
        pid = cluster.workers[0].pid
        time.sleep(1.0)
        idle = pss_mib(pid)
        peak = [idle]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.25):
                peak.append(pss_mib(pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        count = size * 2
        inputs = [{"item": i, "latency_s": latency_s} for i in range(count)]
        cpu_before = cpu_s(pid)
        begin = time.monotonic()
        run = cluster.fleet().map("agentfleet.simulated_agent", inputs, name=f"bench-{pool}-{size}")
        summary = run.wait(timeout_s=max(120.0, count * latency_s / 4))
        wall = time.monotonic() - begin
        cpu_used = cpu_s(pid) - cpu_before
        stop.set()
        sampler.join()
    ideal = size / latency_s
    throughput = summary.succeeded / wall if wall else 0.0
    busy = max(peak)
    return {
        "pool": pool,
        "size": size,
        "tasks": count,
        "succeeded": summary.succeeded,
        "wall_s": round(wall, 2),
        "throughput_per_s": round(throughput, 1),
        "share_of_ideal": round(throughput / ideal, 3),
        "cpu_ms_per_item": round(1000 * cpu_used / count, 1),
        "startup_s": round(startup_s, 1),
        "idle_pss_mib": round(idle, 1),
        "busy_pss_mib": round(busy, 1),
        "mib_per_slot": round(busy / size, 2),
        "marginal_mib_per_slot": round((busy - idle) / size, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", default="threads,gevent,prefork")
    parser.add_argument("--sizes", default="50,100,200")
    parser.add_argument("--latency-s", type=float, default=1.0)
    args = parser.parse_args()
    rows = []
    with EmbeddedRedis() as server:
        for size in [int(s) for s in args.sizes.split(",")]:
            for pool in args.pools.split(","):
                row = measure(pool, size, server.url, args.latency_s)
                rows.append(row)
                print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pool_choice.json").write_text(json.dumps(rows, indent=2))
    header = (
        f"{'pool':8} {'size':>5} {'items/s':>8} {'of ideal':>9} {'CPU ms/item':>12} "
        f"{'idle MiB':>9} {'busy MiB':>9} {'MiB/slot':>9}"
    )
    print(header)
    for r in rows:
        print(
            f"{r['pool']:8} {r['size']:>5} {r['throughput_per_s']:>8} {r['share_of_ideal']:>9.0%} "
            f"{r['cpu_ms_per_item']:>12} "
            f"{r['idle_pss_mib']:>9} {r['busy_pss_mib']:>9} {r['mib_per_slot']:>9}"
        )


if __name__ == "__main__":
    main()
