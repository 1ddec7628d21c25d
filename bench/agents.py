"""Real agents at scale: Fleet.map of SDK agent tasks against asyncio.gather of the same SDK calls.

200 tasks of the built-in ``agentfleet.classify_sentiment`` agent (one Messages call each through
``ctx.anthropic``: fleet transport, limiter, guard, accounting) against the mock Messages API at
1 s latency, at a total concurrency of 50 (2 worker processes, thread pool, 25 threads each).

The mock server runs in a process of its own (``agentfleet mock-llm``), so its
CPU does not count against either side. Baselines, measured in the same run against the same
server:

- the ideal: tasks / concurrency x latency (200 / 50 x 1 s = 4 s);
- ``asyncio.gather`` of the same ``messages.create`` calls on ``AsyncAnthropic`` (semaphore 50,
  ``max_retries=0``), in this process.

Memory: the resident set (RSS, from /proc) of the worker processes and their children, sampled
every 20 ms during the fleet run. Reported per in-flight agent (the peak in flight is the mock
server's own count of concurrent requests): the peak RSS, and its growth over the idle
workers' RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic

from agentfleet.cli.demo_texts import QUICKSTART_TEXTS
from agentfleet.local import LocalCluster
from agentfleet.tasks.llm_tasks import SENTIMENT_MAX_TOKENS, sentiment_prompt

MODEL = "claude-haiku-4-5"
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


# The mock server, in its own process --------------------------------------------------------------


@contextmanager
def mock_server(latency_s: float) -> Iterator[str]:
    """``agentfleet mock-llm`` on a free port; yields its URL, stops it by pid."""
    command = [sys.executable, "-m", "agentfleet", "mock-llm", "--port", "0", "--latency", str(latency_s)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        if " on " not in banner:
            raise RuntimeError(f"the mock server did not start: {banner!r}")
        yield banner.split(" on ", 1)[1].split()[0]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def control(url: str, path: str, body: Any = None) -> Any:
    """Call one of the mock server's ``/_mock/*`` endpoints; its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{url}/_mock/{path}", data=data, method="POST" if data is not None else "GET"
    )
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


# Resident memory ------------------------------------------------------------------------------------


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return 0


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def tree_rss_bytes(pids: list[int]) -> int:
    """RSS of the processes ``pids`` and all their descendants, in bytes."""
    total, pending, seen = 0, list(pids), set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _rss_bytes(pid)
        pending += _children(pid)
    return total


class PeakSampler:
    """Samples ``tree_rss_bytes(pids)`` every ``interval_s`` seconds in a thread; keeps the peak."""

    def __init__(self, pids: list[int], interval_s: float = 0.02) -> None:
        self.pids = pids
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self.pids))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# The two ways to run the same calls ---------------------------------------------------------------


def texts(n: int) -> list[str]:
    return [f"{QUICKSTART_TEXTS[i % len(QUICKSTART_TEXTS)]} (#{i})" for i in range(n)]


def gather_seconds(url: str, items: list[str], concurrency: int) -> float:
    """Wall clock of ``asyncio.gather`` over the same SDK calls, at most ``concurrency`` at once."""

    async def main() -> None:
        gate = asyncio.Semaphore(concurrency)
        async with anthropic.AsyncAnthropic(base_url=url, api_key="bench", max_retries=0) as client:

            async def one(text: str) -> None:
                async with gate:
                    await client.messages.create(
                        model=MODEL,
                        max_tokens=SENTIMENT_MAX_TOKENS,
                        messages=[{"role": "user", "content": sentiment_prompt(text)}],
                    )

            await asyncio.gather(*(one(text) for text in items))

    started = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - started


def fleet_seconds(cluster: LocalCluster, items: list[str]) -> tuple[float, int]:
    """Wall clock of ``Fleet.map`` of the sentiment agent over ``items``; and its successes."""
    fleet = cluster.fleet()
    started = time.perf_counter()
    run = fleet.map("agentfleet.classify_sentiment", [{"text": text} for text in items], name="bench-agents")
    summary = run.wait(timeout_s=600)
    return time.perf_counter() - started, summary.succeeded


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--latency", type=float, default=1.0, help="mock latency, seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=25, help="per worker")
    args = parser.parse_args()
    concurrency = args.workers * args.threads
    ideal = args.tasks / concurrency * args.latency

    with mock_server(args.latency) as url:
        env = {"AGENTFLEET_LLM__BASE_URL": url}
        with LocalCluster(
            workers=args.workers, concurrency=args.threads, pool="threads", env=env, loglevel="WARNING"
        ) as cluster:
            # Warm up both sides (imports, connection pools, every worker thread), then measure.
            control(url, "config", {"latency": 0.05})
            fleet_seconds(cluster, texts(concurrency * 2))
            gather_seconds(url, texts(concurrency), concurrency)
            control(url, "config", {"latency": args.latency})
            control(url, "reset", {})

            t_gather = gather_seconds(url, texts(args.tasks), concurrency)
            gather_peak = control(url, "stats")["max_in_flight"]
            control(url, "reset", {})

            pids = [worker.pid for worker in cluster.workers]
            idle = tree_rss_bytes(pids)
            with PeakSampler(pids) as sampler:
                t_fleet, succeeded = fleet_seconds(cluster, texts(args.tasks))
            stats = control(url, "stats")
            in_flight = int(stats["max_in_flight"])

    mib = 1024 * 1024
    print(
        f"# {args.tasks} sentiment agents, one Messages call each at {args.latency} s mock latency, "
        f"concurrency {concurrency} ({args.workers} workers x {args.threads} threads)"
    )
    print(f"ideal ({args.tasks}/{concurrency} x {args.latency} s)    {ideal:7.2f} s")
    print(
        f"asyncio.gather (AsyncAnthropic)  {t_gather:7.2f} s   {t_gather / ideal:5.3f}x ideal   "
        f"(peak in flight {gather_peak})"
    )
    print(
        f"Fleet.map (classify_sentiment)   {t_fleet:7.2f} s   {t_fleet / ideal:5.3f}x ideal   "
        f"{t_fleet / t_gather:5.3f}x gather   ({succeeded}/{args.tasks} ok, "
        f"{stats['requests']} requests, peak in flight {in_flight})"
    )
    print(
        f"worker RSS: idle {idle / mib:6.1f} MiB, peak {sampler.peak / mib:6.1f} MiB over "
        f"{args.workers} processes; per in-flight agent {sampler.peak / max(in_flight, 1) / mib:5.2f} MiB "
        f"(peak) and {(sampler.peak - idle) / max(in_flight, 1) / 1024:6.1f} KiB (growth over idle)"
    )


if __name__ == "__main__":
    main()
