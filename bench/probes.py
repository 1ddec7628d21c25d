"""How fast ``agentfleet serve`` answers ``/health`` and ``/metrics``, over real HTTP.

A LocalCluster (embedded Redis, two real workers) with some history (a finished run, a dead
letter, a paused downstream) and the service under uvicorn in a subprocess. Each probe is
timed as a kubelet's would be: one HTTP GET on a new connection (``http.client``). The
baseline, measured in the same run against the same Redis and workers, is what every probe
paid before the heartbeat on top of its Redis reads: a Celery ``ping`` of the workers, which
waits its whole timeout (the previous default, 1 s) for late replies. Targets: well under
100 ms, a small fraction of the baseline.

    .venv/bin/python bench/probes.py [--requests 50]
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from agentfleet import LocalCluster
from agentfleet.embedded_redis import free_port
from agentfleet.ratelimit import Limiter

HERE = Path(__file__).resolve().parent
PING_TIMEOUT_S = 1.0


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def _serve(cluster: LocalCluster, port: int) -> subprocess.Popen[bytes]:
    env = {**cluster.worker_env(), "AGENTFLEET_SERVICE__PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, "-m", "agentfleet", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            _get(port, "/health")
            return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("agentfleet serve did not start")


def _get(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _timed_gets(port: int, path: str, count: int) -> list[float]:
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        status = _get(port, path)
        timings.append(time.perf_counter() - started)
        assert status == 200, f"{path} answered {status}"
    return timings


def _pings(cluster: LocalCluster, count: int) -> list[float]:
    """What each probe paid before: a ping of the workers, waiting out its timeout."""
    app = cluster.fleet().app
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        app.control.ping(timeout=PING_TIMEOUT_S)
        timings.append(time.perf_counter() - started)
    return timings


def _line(label: str, timings: list[float], baseline: list[float]) -> str:
    median, p99 = statistics.median(timings), _percentile(timings, 99)
    ratio = median / statistics.median(baseline)
    return (
        f"{label:<28} median {median * 1000:7.1f} ms  p99 {p99 * 1000:7.1f} ms  {ratio:6.3f}x the ping probe"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=50, help="GETs per endpoint")
    args = parser.parse_args()
    env = {"PYTHONPATH": str(HERE), "AGENTFLEET_TASK_MODULES": "bench_tasks"}
    with LocalCluster(workers=2, concurrency=4, env=env, loglevel="WARNING") as cluster:
        fleet = cluster.fleet()
        fleet.map("agentfleet.simulated_agent", [{"item": i, "latency_s": 0.0} for i in range(20)]).wait(60)
        fleet.map("agentfleet.simulated_agent", [{"item": 0, "permanent": True}]).wait(60)
        Limiter.from_settings(fleet.settings, fleet.store.client).pause("anthropic:claude-haiku-4-5", 600)
        port = free_port()
        service = _serve(cluster, port)
        try:
            health = _timed_gets(port, "/health", args.requests)
            metrics = _timed_gets(port, "/metrics", args.requests)
        finally:
            service.terminate()
            service.wait(timeout=10)
        baseline = _pings(cluster, max(5, args.requests // 5))
    print(f"{args.requests} GETs each over HTTP, 2 workers, {os.cpu_count()} CPUs")
    print(_line("baseline: a ping of workers", baseline, baseline))
    print(_line("/health", health, baseline))
    print(_line("/metrics", metrics, baseline))


if __name__ == "__main__":
    main()
