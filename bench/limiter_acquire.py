"""The cost of one limiter acquire, against an embedded Redis.

Measures the round trip of one acquire (a single EVALSHA) as a ratio to a PING on the same
connection, interleaved so both see the same machine load, the time each spends inside Redis,
and how many acquires one process completes a second. Target: mean and p99 at most 2x a PING.

    .venv/bin/python bench/limiter_acquire.py [--samples 20000] [--seconds 3]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import threading
import time
from collections.abc import Callable

import redis

from agentfleet.config import LimitSpec
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.ratelimit import Limiter
from agentfleet.ratelimit.store import Admission

# Limits high enough that every acquire is granted: the benchmark measures the cost of asking.
LIMITS = {
    "host.example": LimitSpec(rate_per_s=1e9, burst=10**9),
    "capped.example": LimitSpec(rate_per_s=1e9, burst=10**9, max_concurrency=10**9),
    "anthropic:bench": LimitSpec(
        requests_per_min=1e12, input_tokens_per_min=1e15, output_tokens_per_min=1e15
    ),
}
# label: (downstream, input tokens, output tokens, max_parallelism)
SCENARIOS: dict[str, tuple[str, int, int, int | None]] = {
    "no limit (pause check)": ("free.example", 0, 0, None),
    "rate bucket": ("host.example", 0, 0, None),
    "3 LLM buckets": ("anthropic:bench", 1500, 512, None),
    "bucket + lease + fleet": ("capped.example", 0, 0, 10**9),
}


def _limiter(client: redis.Redis, max_parallelism: int | None) -> Limiter:
    return Limiter(
        client,
        prefix="bench",
        limits=LIMITS,
        default=LimitSpec(),
        max_parallelism=max_parallelism,
    )


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


def _admit_call(
    limiter: Limiter, name: str, inp: int, out: int
) -> tuple[Callable[[], object], Callable[[], object]]:
    """One store-level acquire (exactly one EVALSHA), and an untimed cleanup for its lease."""
    # The store call alone, so the figure is the round trip and nothing of the waiting loop.
    plan = limiter._plan((name,))
    admission: Admission = plan.admission
    costs = plan.costs(inp, out)
    semaphores = [sem for sem, _ in admission.semaphores]
    lease = {"id": ""}
    ids = itertools.count()

    def admit() -> object:
        lease["id"] = f"bench{next(ids)}"
        return limiter.store.admit(admission, costs, lease_id=lease["id"], lease_ttl_s=30)

    def cleanup() -> object:
        return limiter.store.release(semaphores, lease["id"], held_s=0) if semaphores else None

    return admit, cleanup


def _server_usec(client: redis.Redis, command: str, call: Callable[[], object]) -> float:
    """Mean microseconds inside Redis per ``command`` while ``call`` runs alone 2,000 times."""
    client.config_resetstat()
    for _ in range(2000):
        call()
    usec = float(client.info("commandstats")[f"cmdstat_{command}"]["usec_per_call"])
    client.flushdb()  # the leases those acquires took; this Redis is the benchmark's own
    return usec


def round_trips(client: redis.Redis, samples: int) -> None:
    print(f"round trip, {samples} samples each, interleaved with PING on one connection")
    print(
        f"{'acquire':<24}{'mean us':>9}{'p50 us':>9}{'p99 us':>9}{'x PING mean':>13}"
        f"{'x PING p99':>12}{'server us':>11}"
    )
    for label, (name, inp, out, max_parallelism) in SCENARIOS.items():
        admit, cleanup = _admit_call(_limiter(client, max_parallelism), name, inp, out)
        for _ in range(500):
            client.ping()
            admit()
            cleanup()
        pings: list[float] = []
        acquires: list[float] = []
        for _ in range(samples):
            t0 = time.perf_counter()
            client.ping()
            t1 = time.perf_counter()
            decision = admit()
            t2 = time.perf_counter()
            cleanup()
            pings.append(t1 - t0)
            acquires.append(t2 - t1)
        assert getattr(decision, "granted", False)
        server_ping = _server_usec(client, "ping", client.ping)
        server_acquire = _server_usec(client, "evalsha", admit)
        ping_mean, acq_mean = statistics.fmean(pings), statistics.fmean(acquires)
        ping_p99, acq_p99 = _percentile(pings, 99), _percentile(acquires, 99)
        print(
            f"{'PING':<24}{ping_mean * 1e6:>9.1f}{_percentile(pings, 50) * 1e6:>9.1f}"
            f"{ping_p99 * 1e6:>9.1f}{'':>25}{server_ping:>11.1f}"
        )
        print(
            f"{label:<24}{acq_mean * 1e6:>9.1f}{_percentile(acquires, 50) * 1e6:>9.1f}"
            f"{acq_p99 * 1e6:>9.1f}{acq_mean / ping_mean:>12.2f}x{acq_p99 / ping_p99:>11.2f}x"
            f"{server_acquire:>11.1f}"
        )


def _acquires_per_s(limiter: Limiter, name: str, inp: int, out: int, seconds: float, n_threads: int) -> float:
    counts = [0] * n_threads
    stop = time.monotonic() + seconds

    def run(slot: int) -> None:
        while time.monotonic() < stop:
            with limiter.acquire(name, input_tokens=inp, output_tokens=out):
                counts[slot] += 1

    workers = [threading.Thread(target=run, args=(i,)) for i in range(n_threads)]
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / (time.monotonic() - started)


def throughput(url: str, seconds: float, threads: int) -> None:
    print(f"\nLimiter.acquire() + release() per second, one process, {seconds:g} s each")
    print(f"{'downstream':<24}{'threads':>8}{'acquires/s':>12}")
    for label, (name, inp, out, max_parallelism) in SCENARIOS.items():
        for n_threads in (1, threads):
            client = redis.Redis.from_url(url, decode_responses=True, max_connections=64)
            limiter = _limiter(client, max_parallelism)
            rate = _acquires_per_s(limiter, name, inp, out, seconds, n_threads)
            print(f"{label:<24}{n_threads:>8}{rate:>12,.0f}")
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url, decode_responses=True, single_connection_client=True)
        round_trips(client, args.samples)
        client.close()
        throughput(server.url, args.seconds, args.threads)


if __name__ == "__main__":
    main()
