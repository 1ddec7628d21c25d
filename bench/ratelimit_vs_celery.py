"""Cluster-wide rate limit: agentfleet's limiter against Celery's built-in ``rate_limit``.

One run, one embedded Redis, the same worker processes (threads pool), side by side:

(a) a fleet task whose downstream (the host it calls) has ``rate_per_s`` = R in the limits
    table, enforced by agentfleet's limiter across every worker;
(b) a plain Celery task with ``rate_limit="R/s"``, which each worker enforces on its own.

Both make one GET to a local server that records arrival times; each is given a backlog far
larger than it can finish, and is measured for S seconds from its first request. Prints the
admitted rate as a ratio to R, not counting the tokens a bucket starts with (ours holds one
second's worth by default, Celery's one token): target for ours 0.95 to 1.0. In principle
Celery's per-worker limit lets W workers admit up to W x R; min/s and max/s show how even
each one's pace is.

    .venv/bin/python bench/ratelimit_vs_celery.py [--rate 20] [--seconds 20] [--workers 4] [--burst B]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _arrivals import ArrivalServer  # noqa: E402

from agentfleet.celery_config import make_app  # noqa: E402
from agentfleet.local import LocalCluster  # noqa: E402
from agentfleet.ratelimit import default_burst  # noqa: E402

OURS_HOST = "127.0.0.21"
CELERY_HOST = "127.0.0.22"


def _measure(server: ArrivalServer, seconds: float, timeout_s: float = 60.0) -> list[float]:
    """Arrivals in the ``seconds`` after the first one."""
    deadline = time.monotonic() + timeout_s
    while not server.times():
        if time.monotonic() > deadline:
            raise SystemExit(f"no request reached {server.host} in {timeout_s:g} s")
        time.sleep(0.05)
    first = server.times()[0]
    time.sleep(max(0.0, first + seconds + 0.5 - time.time()))
    return [t for t in server.times() if t < first + seconds]


def _report(label: str, times: list[float], rate: float, seconds: float, burst: float) -> None:
    # A bucket starts full: its first `burst` admissions are a one-off allowance, not rate.
    per_second = [sum(1 for t in times if k <= t - times[0] < k + 1) for k in range(int(seconds))]
    ratio = max(0.0, len(times) - burst) / (rate * seconds)
    print(
        f"{label:<34}{burst:>6g}{len(times):>9}{len(times) / seconds:>8.2f}{ratio:>9.3f}x"
        f"{min(per_second):>7}{max(per_second):>7}"
    )


def ours(cluster: LocalCluster, server: ArrivalServer, backlog: int, seconds: float) -> list[float]:
    import _ratelimit_tasks as tasks

    run = cluster.fleet().map(tasks.fleet_limited_get, [{"url": server.url()}] * backlog)
    times = _measure(server, seconds)
    run.cancel()
    run.wait(timeout_s=120)
    return times


def celery(cluster: LocalCluster, server: ArrivalServer, backlog: int, seconds: float) -> list[float]:
    app = make_app(cluster.fleet().settings.model_copy(update={"broker_url": cluster.broker_url}))
    send: Callable[..., object] = app.send_task
    for _ in range(backlog):
        send("bench.celery_limited_get", args=[server.url()])
    times = _measure(server, seconds)
    app.control.purge()
    app.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=20.0, help="requests a second, for both")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each is measured")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (threads pool)")
    parser.add_argument("--concurrency", type=int, default=8, help="threads per worker")
    parser.add_argument(
        "--burst", type=int, default=None, help="our bucket's size (default: one second's worth)"
    )
    args = parser.parse_args()
    burst = args.burst if args.burst is not None else default_burst(args.rate)
    limit = {"rate_per_s": args.rate, "burst": burst}
    env = {
        "PYTHONPATH": str(HERE),
        "AGENTFLEET_TASK_MODULES": "_ratelimit_tasks",
        "BENCH_RATE_PER_S": f"{args.rate:g}",
        "AGENTFLEET_LIMITS": json.dumps({OURS_HOST: limit}),
        "AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS": '["127.0.0.0/8"]',
    }
    os.environ["BENCH_RATE_PER_S"] = env["BENCH_RATE_PER_S"]
    # A backlog no configuration could finish in time: the limit, not the queue, sets the pace.
    ours_backlog = int(args.rate * args.seconds * 1.5) + 50
    celery_backlog = int(args.rate * args.seconds * args.workers * 1.2) + 50
    with LocalCluster(workers=args.workers, concurrency=args.concurrency, pool="threads", env=env) as cluster:
        print(
            f"{args.workers} worker processes x {args.concurrency} threads, one embedded Redis; "
            f"configured {args.rate:g} requests/s; {args.seconds:g} s each"
        )
        with ArrivalServer(OURS_HOST) as server:
            ours_times = ours(cluster, server, ours_backlog, args.seconds)
        with ArrivalServer(CELERY_HOST) as server:
            celery_times = celery(cluster, server, celery_backlog, args.seconds)
    print(f"{'limiter':<34}{'burst':>6}{'admitted':>9}{'per s':>8}{'ratio':>10}{'min/s':>7}{'max/s':>7}")
    _report("agentfleet (cluster-wide limiter)", ours_times, args.rate, args.seconds, burst)
    # kombu's TokenBucket, which Celery's rate_limit uses, holds one token.
    _report("Celery rate_limit (per worker)", celery_times, args.rate, args.seconds, 1)


if __name__ == "__main__":
    main()
