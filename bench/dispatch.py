"""Dispatch: how fast ``Fleet.map`` sends a run, against the wire, and what a million costs.

One embedded Redis, no workers (the messages stay in their queue).

- 10,000 items, in ``--rounds`` alternating rounds: ``Fleet.map`` from call to return (every
  item recorded and its message in the queue), against one pipelined ``LPUSH`` per message of
  the very same payloads (read back from the queue) and a plain Celery ``group.apply_async`` of
  10,000 tasks with the same keyword input. Prints the medians and their ratios.
- 1,000,000 items from a JSON Lines file read line by line (as ``agentfleet run`` reads it),
  while a thread empties the queue as workers would: items per second, and the growth of this
  process's peak resident memory over its peak before the dispatch.

Targets: ``Fleet.map`` at most 5x the pipelined LPUSH; a million in under 200 MB.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis
from celery import group

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _plain import PlainWorkers  # noqa: E402
from _probes import peak_rss_mib  # noqa: E402

from agentfleet.cli.run_cmd import read_inputs  # noqa: E402
from agentfleet.config import load_settings  # noqa: E402
from agentfleet.embedded_redis import EmbeddedRedis  # noqa: E402
from agentfleet.orchestration import Fleet  # noqa: E402
from agentfleet.transport.layout import queue_keys  # noqa: E402

TASK = "agentfleet.simulated_agent"


def _inputs(count: int) -> list[dict[str, object]]:
    return [{"item": i, "latency_s": 1.0, "text": f"the input of item {i}"} for i in range(count)]


def _payloads(client: redis.Redis, queue: str) -> tuple[list[str], list[bytes]]:
    keys = [k for k in queue_keys(queue) if client.llen(k)]
    found = [raw for key in keys for raw in client.lrange(key, 0, -1)]
    return keys, found


def fleet_side(fleet: Fleet, client: redis.Redis, count: int) -> tuple[float, float]:
    """Seconds ``Fleet.map`` took, and one pipelined LPUSH of the same payloads."""
    queue = fleet.settings.queues.agents
    items = _inputs(count)
    started = time.perf_counter()
    fleet.map(TASK, items)
    took = time.perf_counter() - started
    keys, payloads = _payloads(client, queue)
    assert len(payloads) == count, len(payloads)
    client.delete(*keys)
    started = time.perf_counter()
    pipe = client.pipeline(transaction=False)
    for raw in payloads:
        pipe.lpush(queue, raw)
    pipe.execute()
    wire = time.perf_counter() - started
    client.delete(queue)
    return took, wire


def celery_side(plain: PlainWorkers, client: redis.Redis, count: int) -> float:
    app = plain.app
    items = _inputs(count)
    started = time.perf_counter()
    group(app.signature("plain.noop", kwargs=item, queue="plain.idle") for item in items).apply_async()
    took = time.perf_counter() - started
    client.delete(*queue_keys("plain.idle"))
    return took


def million(fleet: Fleet, client: redis.Redis, count: int) -> tuple[float, float]:
    """Items per second, and MiB of peak memory this process grew by, for ``count`` items."""
    queue = fleet.settings.queues.agents
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as file:
        for i in range(count):
            file.write(f'{{"item": {i}, "latency_s": 1.0, "text": "the input of item {i}"}}\n')
    stop = threading.Event()

    def drain() -> None:
        # The workers, keeping up: whatever is queued goes.
        while not stop.wait(0.2):
            for key in queue_keys(queue):
                client.ltrim(key, 0, -10_001)

    drainer = threading.Thread(target=drain, daemon=True)
    before = peak_rss_mib()
    drainer.start()
    try:
        started = time.perf_counter()
        run = fleet.map(TASK, read_inputs(file.name))
        took = time.perf_counter() - started
    finally:
        stop.set()
        drainer.join()
        client.delete(*queue_keys(queue))
        os.unlink(file.name)
    assert run.total == count
    return count / took, peak_rss_mib() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--million", type=int, default=1_000_000)
    args = parser.parse_args()
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        # The million is dispatched against a queue the drainer keeps short: no waiting. No
        # worker runs here: the messages are read back, never executed.
        settings = load_settings(
            broker_url=server.url, dispatch={"max_queued": 200_000, "require_workers": False}
        )
        plain = PlainWorkers(server.url)  # its client only: the anchor's messages wait unread
        with Fleet(settings) as fleet:
            fleet_side(fleet, client, 100)  # warm up
            # The million first: growth is measured against the peak so far, which the rounds'
            # lists of 10,000 inputs and Celery's group would raise.
            rate, grown = million(fleet, client, args.million) if args.million else (0.0, 0.0)
            maps, wires, groups = [], [], []
            for _ in range(args.rounds):
                took, wire = fleet_side(fleet, client, args.items)
                maps.append(took)
                wires.append(wire)
                groups.append(celery_side(plain, client, args.items))
    m, w, g = statistics.median(maps), statistics.median(wires), statistics.median(groups)
    print(f"# {args.items:,} items, median of {args.rounds} alternating rounds")
    print(f"Fleet.map until every item is sent      {m:7.3f} s  {args.items / m:9.0f} items/s")
    print(f"one pipelined LPUSH of the same payloads {w:7.3f} s  -> Fleet.map {m / w:.2f}x (target <= 5x)")
    ratios = f"{g / w:.1f}x the LPUSH, {g / m:.1f}x Fleet.map"
    print(f"Celery group.apply_async                 {g:7.3f} s  -> {ratios}")
    if args.million:
        print(f"\n# {args.million:,} items from a JSON Lines file, the queue kept short")
        print(f"{rate:,.0f} items/s; this process's peak memory grew {grown:.0f} MiB (target < 200 MiB)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
