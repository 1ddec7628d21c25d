"""What tracing costs one no-op item: agentfleet with OpenTelemetry traces on, against off.

One embedded Redis; two agentfleet workers (a thread pool of 8 each, on queues of their own),
one started with the standard ``OTEL_*`` variables pointing at an OTLP/HTTP sink in this
process, one without. In alternating rounds, each side runs ``--tasks`` no-op items
(``Fleet.map`` of ``agentfleet.simulated_agent``, then ``Run.wait``); the traced side is
dispatched with this process's tracing on (the run's span, the context in every message),
the other with it off. Per round and side: items per second and the worker's CPU per item;
printed as medians and the traced side's ratio and difference (microseconds per item).
Each traced item exports two spans (its delivery and its attempt) plus its run's share.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _otlp_sink import OTLPSink  # noqa: E402
from _probes import cpu_s  # noqa: E402

from agentfleet import tracing  # noqa: E402
from agentfleet.config import load_settings  # noqa: E402
from agentfleet.embedded_redis import EmbeddedRedis  # noqa: E402
from agentfleet.local import LocalCluster  # noqa: E402

OTEL = {"OTEL_SERVICE_NAME": "trace-overhead-bench", "OTEL_BSP_SCHEDULE_DELAY": "200"}


def _switch(on: bool, state: Any) -> None:
    """This process's tracing on (``state``: its SDK side) or off, as if decided at start."""
    from celery import signals

    tracing._state = state if on else False  # the bench's own switch; a process decides once
    if on:
        signals.before_task_publish.connect(state._carry, weak=False)
    else:
        signals.before_task_publish.disconnect(state._carry)


def _round(fleet: Any, worker_pid: int, tasks: int) -> dict[str, float]:
    cpu0, started = cpu_s(worker_pid), time.perf_counter()
    run = fleet.map("agentfleet.simulated_agent", [{"item": i, "latency_s": 0.0} for i in range(tasks)])
    assert run.wait(timeout_s=600).succeeded == tasks
    wall = time.perf_counter() - started
    return {"per_s": tasks / wall, "worker_us": 1e6 * (cpu_s(worker_pid) - cpu0) / tasks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    compare(args.tasks, args.rounds)


def compare(tasks: int, rounds: int) -> None:
    """Measure both sides (``tasks`` items a round, median of ``rounds``) and print them."""
    with EmbeddedRedis() as server, OTLPSink() as sink:
        env = {**OTEL, "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint}
        os.environ.update(env)
        state = tracing._tracing()
        assert state, "tracing did not start (is the otel extra installed?)"
        plain = load_settings(broker_url=server.url, key_prefix="off")
        traced = load_settings(
            broker_url=server.url,
            key_prefix="on",
            queues={"agents": "on.agents", "fanin": "on.fanin", "maintenance": "on.maintenance"},
        )
        for name in env:
            del os.environ[name]
        common = {"workers": 1, "concurrency": 8, "pool": "threads", "broker_url": server.url}
        common["loglevel"] = "WARNING"
        with (
            LocalCluster(settings=plain, **common) as off_cluster,
            LocalCluster(settings=traced, env=env, **common) as on_cluster,
        ):
            off_fleet, on_fleet = off_cluster.fleet(), on_cluster.fleet()
            sides: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
            pids = {"off": off_cluster.workers[0].pid, "on": on_cluster.workers[0].pid}
            fleets = {"off": off_fleet, "on": on_fleet}
            for n in range(rounds + 1):  # the first round of each side warms it up
                for side in ("off", "on"):
                    _switch(side == "on", state)
                    result = _round(fleets[side], pids[side], tasks)
                    if n:
                        sides[side].append(result)
            _switch(True, state)
            tracing.flush()
    med = {side: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for side, rows in sides.items()}
    on, off = med["on"], med["off"]
    print(f"# {tasks} no-op items, 1 worker of 8 threads a side, median of {rounds} rounds")
    print(f"{'':28s}{'traces off':>12s}{'traces on':>12s}{'ratio':>8s}{'difference':>14s}")
    print(
        f"{'items per second':28s}{off['per_s']:12.0f}{on['per_s']:12.0f}{on['per_s'] / off['per_s']:7.2f}x"
        f"{1e6 / on['per_s'] - 1e6 / off['per_s']:+10.0f} us/item"
    )
    print(
        f"{'worker CPU per item (us)':28s}{off['worker_us']:12.0f}{on['worker_us']:12.0f}"
        f"{on['worker_us'] / off['worker_us']:7.2f}x{on['worker_us'] - off['worker_us']:+10.0f} us/item"
    )
    print(f"OTLP exports received: {sink.exports} ({sink.bytes / 1024:.0f} KiB)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
