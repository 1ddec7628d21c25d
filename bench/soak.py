"""Soak: a steady stream of runs for ``--minutes`` (30), watching what must stay flat.

One embedded Redis, one threads worker (16 slots) and one gevent worker (100 slots) on the same
queues, and records that expire after ``--ttl-s`` (300 s, so that they turn over within the
soak). Every ``--every-s`` seconds a run of ``--items`` items of about 1 s (lognormal) is
dispatched and followed to its end; every minute the workers' resident memory and open files,
Redis's clients, its connections accepted so far, its keys and its memory are sampled.

At the end it prints the samples and:

- each worker's resident memory growth from minute 5 to the end (target under 10%);
- each worker's open files at minute 5 and at the end (target: flat);
- Redis connections accepted per item after minute 5 (a worker opening one per task shows
  here as about 1);
- Redis keys from the first minute after the records began to expire to the end (target:
  flat);
- items lost (every item of every run must have its outcome).

Run it alone, in the background (``nohup .venv/bin/python bench/soak.py > soak.log &``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _probes import open_fds, tree  # noqa: E402

from agentfleet.config import load_settings  # noqa: E402
from agentfleet.embedded_redis import EmbeddedRedis  # noqa: E402
from agentfleet.local import LocalCluster  # noqa: E402

RESULTS = HERE / "results"


def rss_tree_mib(pid: int) -> float:
    total = 0
    for member in tree(pid):
        try:
            with open(f"/proc/{member}/statm") as statm:
                total += int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            continue
    return total / 2**20


def sample(client: redis.Redis, workers: dict[str, int], minute: int, items: int) -> dict[str, Any]:
    info = client.info()
    row: dict[str, Any] = {
        "minute": minute,
        "items": items,
        "redis_clients": info["connected_clients"],
        "redis_connections": info["total_connections_received"],
        "redis_keys": client.dbsize(),
        "redis_mib": round(info["used_memory"] / 2**20, 1),
    }
    for name, pid in workers.items():
        row[f"{name}_mib"] = round(rss_tree_mib(pid), 1)
        row[f"{name}_fds"] = open_fds(pid)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every-s", type=float, default=4.7)
    parser.add_argument("--items", type=int, default=37)
    parser.add_argument("--ttl-s", type=int, default=300)
    args = parser.parse_args()
    env = {"AGENTFLEET_RESULT_TTL_S": str(args.ttl_s)}
    os.environ.update(env)
    settings = load_settings()
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        with (
            LocalCluster(workers=1, concurrency=16, pool="threads", broker_url=server.url, env=env,
                         settings=settings, loglevel="WARNING") as threads,
            LocalCluster(workers=1, concurrency=100, pool="gevent", broker_url=server.url, env=env,
                         settings=settings, loglevel="WARNING") as gevent,
        ):  # fmt: skip
            fleet = threads.fleet()
            workers = {"threads": threads.workers[0].pid, "gevent": gevent.workers[0].pid}
            done, lost, runs = [0], [0], []
            lock = threading.Lock()

            def follow(run: Any) -> None:
                summary = run.wait(timeout_s=600)
                with lock:
                    done[0] += summary.succeeded
                    lost[0] += summary.tasks_total - summary.succeeded

            started = time.monotonic()
            samples = [sample(client, workers, 0, 0)]
            next_sample = started + 60
            while time.monotonic() - started < args.minutes * 60:
                inputs = [
                    {"item": i, "latency_s": 1.0, "jitter_s": 0.5, "distribution": "lognormal"}
                    for i in range(args.items)
                ]
                run = fleet.map("agentfleet.simulated_agent", inputs)
                follower = threading.Thread(target=follow, args=(run,), daemon=True)
                follower.start()
                runs.append(follower)
                if time.monotonic() >= next_sample:
                    samples.append(sample(client, workers, len(samples), done[0]))
                    print(json.dumps(samples[-1]), flush=True)
                    next_sample += 60
                time.sleep(args.every_s)
            for follower in runs:
                follower.join(timeout=600)
            samples.append(sample(client, workers, len(samples), done[0]))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak.json").write_text(json.dumps(samples, indent=2))
    report(samples, runs=len(runs), lost=lost[0], ttl_s=args.ttl_s)


def report(samples: list[dict[str, Any]], *, runs: int, lost: int, ttl_s: int) -> None:
    at5 = samples[min(5, len(samples) - 1)]
    end = samples[-1]
    print(f"\n# soak: {len(samples) - 1} minutes, {runs} runs, {end['items']} items, {lost} lost")
    for name in ("threads", "gevent"):
        growth = (end[f"{name}_mib"] - at5[f"{name}_mib"]) / at5[f"{name}_mib"]
        print(
            f"{name:8s} worker: {at5[f'{name}_mib']:.1f} -> {end[f'{name}_mib']:.1f} MiB from minute 5 "
            f"({growth:+.1%}, target < 10%); open files {at5[f'{name}_fds']} -> {end[f'{name}_fds']}"
        )
    items = max(1, end["items"] - at5["items"])
    per_item = (end["redis_connections"] - at5["redis_connections"]) / items
    print(f"Redis connections accepted per item after minute 5: {per_item:.3f}")
    turned = samples[min(len(samples) - 1, ttl_s // 60 + 2)]
    keys = f"{turned['redis_keys']} at minute {turned['minute']}, {end['redis_keys']} at the end"
    print(f"Redis keys once records expire: {keys}")


if __name__ == "__main__":
    main()
