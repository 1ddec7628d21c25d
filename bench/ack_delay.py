"""Acknowledgement delay per pool: from a task's ``ack()`` (and from its end) to its message
leaving Redis's ``unacked``.

One embedded Redis. For each pool (prefork, threads, solo, gevent; one worker of 2 slots, solo 1), on an idle
worker, one item at a time (nothing else to carry an acknowledgement): ``--items`` fleet items
(``bench.fleet_marked``) and ``--items`` plain Celery tasks (``bench.plain_marked``) on an
agentfleet worker, then ``--items`` plain Celery tasks (``plain.marked``) on a plain Celery
worker on kombu's own transport (``plain_app``). Each body writes the time it ended (Unix
seconds) to Redis, and the workers note when kombu's ``Message.ack`` was called (``_ack_probe``);
this process watches the message's ``unacked`` entry (every millisecond) and takes the time it
is gone. Prints, in milliseconds, each side's median, 90th percentile and largest delay from
``ack()`` and from the body's end. The bound for a fleet item's acknowledgement is
``ACK_DELAY_S`` (50 ms); a plain task's is sent when ``ack()`` is called, as kombu's own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _plain import PlainWorkers  # noqa: E402

from agentfleet.config import load_settings  # noqa: E402
from agentfleet.embedded_redis import EmbeddedRedis  # noqa: E402
from agentfleet.local import LocalCluster  # noqa: E402

POOLS = ("prefork", "threads", "solo", "gevent")


def _tag_of(client: redis.Redis, task_id: str) -> str | None:
    for tag, raw in client.hgetall("unacked").items():
        if json.loads(raw)[0]["headers"]["id"] == task_id:
            return str(tag)
    return None


def _delays_ms(client: redis.Redis, mark: str, task_id: str) -> tuple[float, float]:
    """Milliseconds from ``ack()`` and from the body's end (its mark) to the message's entry
    leaving ``unacked``."""
    deadline = time.monotonic() + 60
    while (ended := client.get(mark)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{task_id} never ran")
        time.sleep(0.001)
    tag = _tag_of(client, task_id)
    while tag is not None and client.hexists("unacked", tag):
        time.sleep(0.001)
    gone = time.time()
    while (called := client.hget("bench:ack_called", task_id)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{task_id}: no ack() call noted")
        time.sleep(0.001)
    return 1000 * max(0.0, gone - float(called)), 1000 * (gone - float(ended))


def _measure(
    client: redis.Redis, items: int, send: Callable[[str], str], prefix: str
) -> tuple[list[float], list[float]]:
    from_ack, from_end = [], []
    for _ in range(items):
        token = uuid.uuid4().hex
        ack, end = _delays_ms(client, f"{prefix}:end:{token}", send(token))
        from_ack.append(ack)
        from_end.append(end)
        time.sleep(0.05)  # the worker idle again
    return from_ack, from_end


def _summary(delays: list[float]) -> str:
    ordered = sorted(delays)
    p90 = ordered[int(0.9 * (len(ordered) - 1))]
    return f"{statistics.median(ordered):7.1f}{p90:7.1f}{ordered[-1]:7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=30)
    args = parser.parse_args()
    rows: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
    with EmbeddedRedis() as server, redis.Redis.from_url(server.url, decode_responses=True) as client:
        probe = {"BENCH_ACK_PROBE": server.url}
        env = {"PYTHONPATH": str(HERE), "AGENTFLEET_TASK_MODULES": "bench_tasks", **probe}
        for pool in POOLS:
            with LocalCluster(
                workers=1, concurrency=2, pool=pool, broker_url=server.url, env=env,
                settings=load_settings(broker_url=server.url), loglevel="WARNING",
            ) as cluster:  # fmt: skip
                fleet = cluster.fleet()

                def fleet_item(token: str, fleet: object = fleet) -> str:
                    return f"{fleet.map('bench.fleet_marked', [{'token': token}]).id}-0"  # type: ignore[attr-defined]

                def plain_task(token: str, fleet: object = fleet) -> str:
                    return str(fleet.app.send_task("bench.plain_marked", args=[token]).id)  # type: ignore[attr-defined]

                rows[pool, "agentfleet, fleet item"] = _measure(client, args.items, fleet_item, "bench")
                rows[pool, "agentfleet, plain task"] = _measure(client, args.items, plain_task, "bench")
            with PlainWorkers(server.url, pool=pool, concurrency=2, env=probe) as plain:

                def stock_task(token: str, app: object = plain.app) -> str:
                    return str(app.send_task("plain.marked", args=[token]).id)  # type: ignore[attr-defined]

                rows[pool, "kombu, plain task"] = _measure(client, args.items, stock_task, "plain")
    print(f"# acknowledgement delay (ms), {args.items} items each, one at a time on an idle worker")
    columns = f"{'p90':>7s}{'max':>7s}"
    print(f"{'pool':9s}{'side':24s}{'from ack(): p50':>16s}{columns}{'from end: p50':>15s}{columns}")
    for (pool, side), (from_ack, from_end) in rows.items():
        print(f"{pool:9s}{side:24s}{'':2s}{_summary(from_ack)}{'':1s}{_summary(from_end)}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
