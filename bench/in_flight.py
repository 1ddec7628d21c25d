"""Agents in flight at once on one 2-core box: 10,000 of them, and 2,000 against plain Celery.

One embedded Redis (``--maxclients 10000``, as a production Redis has by default).

- 10,000 items of 10 s simulated I/O (``agentfleet.simulated_agent``) on ``--workers`` gevent
  workers of ``--slots`` slots each (2 x 5,000 by default, one process per core): every item
  in flight at once.
  Prints the wall clock over the 10 s ideal, the workers' memory (proportional set size of
  their process trees, sampled every half second) per in-flight item at its peak and over
  their idle size, the most Redis clients and open files seen, any error in their logs, and
  how the items' starts spread out (each item's finish, from its run's event stream, less its
  ``--seconds``, after the dispatch began): with every item in flight at once, the last start
  is what the wall clock adds to the ideal.
- 2,000 items of 2 s on 20 gevent workers x 100, agentfleet against plain Celery
  (``plain_app``, one message reserved per slot), in ``--rounds`` alternating rounds: wall
  clock over the 2 s ideal and memory per in-flight item, medians.

Targets: 10,000 in flight within 1.5x the ideal, at most 2 MB per in-flight item, no errors.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from celery import group

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _plain import PlainWorkers  # noqa: E402
from _probes import RedisUse, cpu_s, open_fds, pss_mib  # noqa: E402

from agentfleet.config import load_settings  # noqa: E402
from agentfleet.embedded_redis import EmbeddedRedis  # noqa: E402
from agentfleet.keys import RunKeys  # noqa: E402
from agentfleet.local import LocalCluster  # noqa: E402

_ERRORS = ("ERROR", "Traceback", "MaxConnectionsError", "Too many connections", "Too many open files")


class Sampler:
    """Samples the memory and open files of process trees, and Redis's clients, in a thread."""

    def __init__(self, pids: list[int], client: redis.Redis) -> None:
        self.pids, self.client = pids, client
        self.idle_mib = sum(pss_mib(p) for p in pids)
        self.peak_mib, self.fds, self.clients = self.idle_mib, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self.peak_mib = max(self.peak_mib, sum(pss_mib(p) for p in self.pids))
            self.fds = max(self.fds, sum(open_fds(p) for p in self.pids))
            self.clients = max(self.clients, int(self.client.info("clients")["connected_clients"]))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def fleet_in_flight(
    url: str, client: redis.Redis, workers: int, slots: int, items: int, seconds: float
) -> dict[str, Any]:
    env = {"AGENTFLEET_BROKER_MAX_CONNECTIONS": str(slots + 100)}
    os.environ.update(env)
    settings = load_settings(broker_url=url)
    with LocalCluster(
        workers=workers,
        concurrency=slots,
        pool="gevent",
        broker_url=url,
        env=env,
        settings=settings,
        loglevel="WARNING",
        startup_timeout_s=300,
    ) as cluster:
        fleet = cluster.fleet()
        fleet.map("agentfleet.simulated_agent", [{"latency_s": 0.0} for _ in range(workers * 10)]).wait(120)
        pids = [w.pid for w in cluster.workers]
        with Sampler(pids, client) as sampled:
            cpu0, redis0 = sum(cpu_s(p) for p in pids), RedisUse.read(client)
            started, dispatched_at = time.perf_counter(), time.time()
            run = fleet.map(
                "agentfleet.simulated_agent", [{"item": i, "latency_s": seconds} for i in range(items)]
            )
            summary = run.wait(timeout_s=900)
            wall = time.perf_counter() - started
            # An event's id is the Redis server's clock in ms when the outcome was recorded.
            events = client.xrange(RunKeys(settings.key_prefix).run(run.id, "events"))
            finished = sorted(
                int(entry_id.split(b"-")[0]) / 1000
                for entry_id, fields in events
                if fields.get(b"kind") == b"outcome"
            )
            starts = [at - dispatched_at - seconds for at in finished]
            cpu = sum(cpu_s(p) for p in pids) - cpu0
            redis_cpu = RedisUse.read(client).since(redis0).cpu_s
        errors = sum(w.log_text().count(marker) for w in cluster.workers for marker in _ERRORS)
    return {
        "wall": wall,
        "cpu_s": cpu,
        "redis_cpu_s": redis_cpu,
        "ok": summary.succeeded,
        "errors": errors,
        "peak_mib": sampled.peak_mib,
        "idle_mib": sampled.idle_mib,
        "fds": sampled.fds,
        "clients": sampled.clients,
        "starts": starts,
    }


def celery_in_flight(
    url: str, client: redis.Redis, workers: int, slots: int, items: int, seconds: float
) -> dict[str, Any]:
    with PlainWorkers(url, count=workers, pool="gevent", concurrency=slots) as plain:
        app = plain.app
        group(app.signature("plain.noop") for _ in range(workers * 10)).apply_async().get(timeout=120)
        with Sampler(plain.pids, client) as sampled:
            started = time.perf_counter()
            result = group(app.signature("plain.sleep", args=(seconds,)) for _ in range(items)).apply_async()
            result.get(timeout=900)
            wall = time.perf_counter() - started
            result.forget()
    return {"wall": wall, "ok": items, "peak_mib": sampled.peak_mib, "idle_mib": sampled.idle_mib}


def _per_item(found: dict[str, Any], items: int) -> tuple[float, float]:
    """MiB per in-flight item: the peak's, and the peak's growth over idle."""
    return found["peak_mib"] / items, (found["peak_mib"] - found["idle_mib"]) / items


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slots", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-celery", action="store_true", help="only the 10,000 in flight")
    args = parser.parse_args()
    with EmbeddedRedis(args=["--maxclients", "10000"]) as server:
        client = redis.Redis.from_url(server.url)
        big = fleet_in_flight(server.url, client, args.workers, args.slots, args.items, args.seconds)
        sides: dict[str, Callable[[], dict[str, Any]]] = {
            "plain Celery": lambda: celery_in_flight(server.url, client, 20, 100, 2000, 2.0),
            "agentfleet": lambda: fleet_in_flight(server.url, client, 20, 100, 2000, 2.0),
        }
        found: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for _ in range(0 if args.skip_celery else args.rounds):
            for side, measure in sides.items():
                found[side].append(measure())
    peak, growth = _per_item(big, args.items)
    ideal = args.seconds
    print(f"# {args.items:,} items of {ideal} s on {args.workers} gevent workers x {args.slots}")
    ratio = big["wall"] / ideal
    print(f"wall clock {big['wall']:.1f} s = {ratio:.2f}x the ideal (target <= 1.5x); ok {big['ok']}")
    print(f"worker memory per in-flight item: {peak:.3f} MiB at the peak, {growth:.3f} MiB over idle")
    print("  (target <= 2 MB)")
    print(f"most Redis clients {big['clients']}, most open files of the workers {big['fds']}")
    print(f"errors in the workers' logs: {big['errors']}")
    starts = big["starts"]
    half, last = starts[len(starts) // 2], starts[-1]
    began = "items started after the dispatch began"
    print(f"{began} (finish less {ideal} s): half by {half:.1f} s, all by {last:.1f} s")
    cores = (big["cpu_s"] + big["redis_cpu_s"]) / big["wall"]
    used = f"workers {big['cpu_s']:.1f} s, Redis {big['redis_cpu_s']:.1f} s"
    print(f"CPU over the run: {used}, {cores:.2f} of {os.cpu_count()} cores")
    if args.skip_celery:
        return
    print(f"\n# 2,000 items of 2 s on 20 gevent workers x 100, median of {args.rounds} alternating rounds")
    for side, rows in found.items():
        wall = statistics.median(r["wall"] for r in rows)
        per = statistics.median(r["peak_mib"] / 2000 for r in rows)
        print(
            f"{side:14s} {wall:6.2f} s = {wall / 2.0:5.2f}x the 2 s ideal, {per:.2f} MiB per in-flight item"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
