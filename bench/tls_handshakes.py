"""TLS handshakes per 1,000 tasks: connections shared by a worker process, against one per task.

A TLS server on loopback (a self-signed certificate, its own count of completed handshakes)
and one agentfleet worker of 8 threads. In ``--rounds`` alternating rounds, 1,000 tasks each
make one GET: ``bench.fetch_shared`` through ``ctx.http`` (the guard checks, pins and fills in
credentials per request; the worker's pools keep connections alive between tasks), and
``bench.fetch_fresh`` through an ``httpx.Client`` of its own per task, which is what every
execution did before the pools were shared. Prints the handshakes each side needed per 1,000
tasks and the wall clock.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from tls_support import TLSCountingServer, make_cert  # noqa: E402

from agentfleet.config import load_settings  # noqa: E402
from agentfleet.local import LocalCluster  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = make_cert(Path(tmp))
        env = {
            "AGENTFLEET_TASK_MODULES": "bench_tasks",
            "PYTHONPATH": str(HERE),
            "AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS": '["localhost"]',
            "SSL_CERT_FILE": str(cert),
        }
        os.environ.update(env)
        found: dict[str, list[tuple[int, float]]] = {"bench.fetch_shared": [], "bench.fetch_fresh": []}
        with (
            TLSCountingServer(cert, key) as server,
            LocalCluster(workers=1, concurrency=8, pool="threads", env=env, settings=load_settings(),
                         loglevel="WARNING") as cluster,
        ):  # fmt: skip
            fleet = cluster.fleet()
            for _ in range(args.rounds):
                for task in found:
                    before, started = server.handshakes, time.perf_counter()
                    run = fleet.map(task, [{"url": server.url()} for _ in range(args.tasks)])
                    assert run.wait(timeout_s=600).succeeded == args.tasks
                    found[task].append((server.handshakes - before, time.perf_counter() - started))
    print(f"# {args.tasks} tasks, one HTTPS GET each, 1 worker of 8 threads; median of {args.rounds} rounds")
    for task, label in (
        ("bench.fetch_fresh", "a client per task"),
        ("bench.fetch_shared", "ctx.http, shared pools"),
    ):
        shakes = statistics.median(h for h, _ in found[task])
        wall = statistics.median(w for _, w in found[task])
        print(f"{label:24s} {shakes * 1000 / args.tasks:7.0f} handshakes per 1,000 tasks  {wall:6.2f} s")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
