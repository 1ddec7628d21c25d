"""The console's pages with a run of 10,000 items: server time per page, and what it keeps in Redis.

One embedded Redis and two real workers (a thread pool of 8 each) run ``--items`` items of
``agentfleet.simulated_agent`` (5 ms each, 5% of attempts failing once and retried, one item
in 50 failing for good). Then the service (``create_app``, in this process, read with the
bearer token) answers each console page ``--repeat`` times; the time is the whole request
through the ASGI app, so the server's time plus a little of the test client's.

Printed per page: the median and worst time in ms, the size of the page, and the median as
a share of the 200 ms target and of the baseline. The baseline, measured in the same run on
the same Redis, is what the run page did before runs kept a timeline: read every item and
parse every outcome of the run's event stream (so the shares hold on a busy machine, where
the milliseconds do not). Then the bytes Redis holds per item for the run's timeline, next
to its event stream and its item list.

Target (docs/benchmarks.md): every page's median under 200 ms at 10,000 items.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

from starlette.testclient import TestClient

from agentfleet.config import Settings, load_settings
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.local import LocalCluster
from agentfleet.service import create_app

TOKEN = "bench-console-" + "0" * 32
TARGET_MS = 200.0


def _times(call: Callable[[], object], repeat: int) -> list[float]:
    call()
    found = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        found.append(1000 * (time.perf_counter() - started))
    return found


def _first_view(settings: Settings, path: str, auth: dict[str, str]) -> float:
    """The median time of ``path`` in a service that has read no timeline yet (a new one each time)."""
    found = []
    for _ in range(5):
        with TestClient(create_app(settings)) as fresh:
            started = time.perf_counter()
            assert fresh.get(path, headers=auth).status_code == 200
            found.append(1000 * (time.perf_counter() - started))
    return statistics.median(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    with EmbeddedRedis() as server:
        settings = load_settings(broker_url=server.url, service={"token": TOKEN})
        with LocalCluster(
            workers=2, concurrency=8, pool="threads", broker_url=server.url, settings=settings
        ) as cluster:
            inputs = [
                {"item": i, "latency_s": 0.005, "failure_rate": 0.05, "seed": 7, "permanent": i % 50 == 49}
                for i in range(args.items)
            ]
            started = time.perf_counter()
            run = cluster.fleet().map("agentfleet.simulated_agent", inputs, name="bench-console")
            summary = run.wait(timeout_s=900)
            took = time.perf_counter() - started
            print(
                f"run of {summary.tasks_total} items: {summary.succeeded} succeeded, "
                f"{summary.failed} failed, {summary.retries} retries, in {took:.1f} s"
            )
            store = cluster.fleet().store
            with TestClient(create_app(settings)) as client:
                auth = {"Authorization": f"Bearer {TOKEN}"}
                pages = [
                    "/console/runs",
                    f"/console/runs/{run.id}",
                    f"/console/runs/{run.id}?show=failed",
                    f"/console/runs/{run.id}?page={args.items // 200}",
                    f"/console/runs/{run.id}/timeline",
                    "/console/workers",
                    "/console/dlq",
                    f"/console/dlq?run={run.id}",
                    "/console/limits",
                    "/console/spend",
                ]
                baseline = statistics.median(
                    _times(lambda: (store.items(run.id), store.outcomes(run.id)), args.repeat)
                )
                print(
                    f"\n{'page':<52} {'median ms':>10} {'worst ms':>9} {'KiB':>6} {'of 200 ms':>10} "
                    f"{'of baseline':>12}"
                )
                worst_median = 0.0
                for path in pages:
                    sizes: list[int] = []

                    def get(path: str = path, sizes: list[int] = sizes) -> None:
                        response = client.get(path, headers=auth)
                        assert response.status_code == 200, (path, response.status_code)
                        sizes.append(len(response.content))

                    found = _times(get, args.repeat)
                    median = statistics.median(found)
                    worst_median = max(worst_median, median)
                    shown = path.replace(run.id, "<run>")
                    print(
                        f"{shown:<52} {median:>10.1f} {max(found):>9.1f} {sizes[-1] / 1024:>6.0f} "
                        f"{median / TARGET_MS:>9.2f}x {median / baseline:>11.2f}x"
                    )
                first = _first_view(settings, f"/console/runs/{run.id}", auth)
                print(
                    f"\nbaseline, every item and outcome read and parsed (the run page before timelines): "
                    f"{baseline:.1f} ms; the run page's first view (no timeline cached): {first:.1f} ms, "
                    f"{first / baseline:.2f}x the baseline"
                )
            redis = store.client
            per_item = {
                part: (redis.memory_usage(store.run_key(run.id, part)) or 0) / args.items
                for part in ("spans", "lanes", "events", "items")
            }
            print(
                "Redis bytes per item: timeline {spans:.0f} (+ lanes {lanes:.2f}), "
                "event stream {events:.0f}, item list {items:.0f}".format(**per_item)
            )
    ok = worst_median <= TARGET_MS
    verdict = "within" if ok else "OVER"
    print(f"\nslowest page median {worst_median:.1f} ms: {verdict} the {TARGET_MS:.0f} ms target")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
