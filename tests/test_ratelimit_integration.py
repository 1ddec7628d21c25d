"""Cluster-wide rate control against three real worker processes and a local HTTP server.

Each test talks to a server on a loopback address of its own (``127.0.0.11``, ``.12``...), so
the fleet sees a distinct downstream per test, with its own limits from ``AGENTFLEET_LIMITS``.
The server records each request's arrival, how many were open at once, and how long each was
held; the assertions are about what it saw, not what the workers say they did.
"""

from __future__ import annotations

import collections
import itertools
import json
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import ratelimit_test_tasks as rt
import redis
from conftest import cluster_env
from http_scripted import Hit, Reply, ScriptedServer, ServerProcess, Span

from agentfleet import LocalCluster
from agentfleet.config import LimitSpec, load_settings
from agentfleet.orchestration import Fleet
from agentfleet.ratelimit import Limiter

pytestmark = pytest.mark.slow

LEASE_TTL_S = 3.0
RATE_HOST = "127.0.0.11"
CAP_HOST = "127.0.0.12"
PAUSED_LIMITED_HOST = "127.0.0.13"
PAUSED_FREE_HOST = "127.0.0.14"
BUDGET_HOST = "127.0.0.15"
STORM_HOST = "127.0.0.16"
KILL_HOST = "127.0.0.17"

# A call is let through by Redis and arrives a little later; on a loaded machine the delay
# varies by up to this many seconds, so a window of arrivals can hold that much more rate.
ARRIVAL_JITTER_S = 0.3

STORM_RATE = 20
STORM_BURST = 5

LIMITS: dict[str, dict[str, float]] = {
    RATE_HOST: {"rate_per_s": 10, "burst": 5},
    CAP_HOST: {"max_concurrency": 3},
    PAUSED_LIMITED_HOST: {"rate_per_s": 40, "burst": 10},
    # PAUSED_FREE_HOST has no limits at all: its pauses must still reach every worker.
    BUDGET_HOST: {"max_concurrency": 1},
    STORM_HOST: {"rate_per_s": STORM_RATE, "burst": STORM_BURST},
    KILL_HOST: {"max_concurrency": 1},
}


def _queues(prefix: str) -> dict[str, str]:
    # Queues of its own: other suites' clusters on the same Redis must take none of its tasks.
    return {name: f"{prefix}.{name}" for name in ("agents", "fanin", "maintenance")}


def _env(prefix: str, **extra: str) -> dict[str, str]:
    queues = {f"AGENTFLEET_QUEUES__{name.upper()}": queue for name, queue in _queues(prefix).items()}
    return cluster_env(
        AGENTFLEET_TASK_MODULES="ratelimit_test_tasks",
        AGENTFLEET_KEY_PREFIX=prefix,
        **queues,
        AGENTFLEET_LIMITS=json.dumps(LIMITS),
        AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS='["127.0.0.0/8"]',
        AGENTFLEET_LIMITER__LEASE_TTL_S=str(LEASE_TTL_S),
        AGENTFLEET_RETRY__BACKOFF_BASE_S="0.1",
        AGENTFLEET_RETRY__BACKOFF_CAP_S="0.5",
        # 5xx answers are the point of one test; they must not open the circuit for others.
        AGENTFLEET_DLQ__VENDOR_ISSUE_FAILURES="100000",
        **extra,
    )


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"trl{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def rcluster(redis_url: str, prefix: str) -> Iterator[LocalCluster]:
    with LocalCluster(
        workers=3,
        concurrency=8,
        pool="threads",
        broker_url=redis_url,
        env=_env(prefix),
        settings=load_settings(key_prefix=prefix, queues=_queues(prefix)),
    ) as running:
        yield running


@pytest.fixture
def fleet(rcluster: LocalCluster) -> Fleet:
    return rcluster.fleet()


# What the server saw ------------------------------------------------------------------------


def _max_in_window(times: list[float], window_s: float) -> tuple[int, float]:
    """The most arrivals in any half-open window of ``window_s`` seconds, and that window's
    start in seconds after the first arrival."""
    ordered = sorted(times)
    most, start, first = 0, 0.0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= window_s:
            first += 1
        if last - first + 1 > most:
            most, start = last - first + 1, ordered[first] - ordered[0]
    return most, start


def _sustained_rate(times: list[float]) -> float:
    """Requests a second: the inverse slope of a least-squares fit of arrival time on index."""
    return 1.0 / statistics.linear_regression(range(len(times)), sorted(times)).slope


def _time_at_level(spans: list[Span], level: int, start: float, end: float) -> float:
    """Seconds within [start, end] during which exactly ``level`` requests were open."""
    events = sorted([(s.start, 1) for s in spans] + [(s.end, -1) for s in spans])
    total, open_now, previous = 0.0, 0, start
    for at, change in events:
        at = min(max(at, start), end)
        if open_now == level:
            total += at - previous
        previous = at
        open_now += change
    if open_now == level:
        total += end - previous
    return total


def _open_at_worst(hits: list[Hit], spans: list[Span]) -> str:
    """The requests open at the server when the most were: arrival, answer and worker pid."""
    worst = max(hits, key=lambda hit: hit.in_flight)
    ends = {span.start: span.end for span in spans}
    rows = [
        f"arrived {hit.at - worst.at:+.3f} s, answered {ends.get(hit.at, float('nan')) - worst.at:+.3f} s, "
        f"pid {hit.headers.get(rt.PID_HEADER, '?')}"
        for hit in hits
        if hit.at <= worst.at <= ends.get(hit.at, float("inf"))
    ]
    return f"{worst.in_flight} in flight at once: " + "; ".join(rows)


@contextmanager
def _pause_watch(fleet: Fleet, downstream: str) -> Iterator[list[float]]:
    """The paused-until times (Unix s) ``downstream`` is seen with while the block runs, read
    from Redis every 10 ms (a pause's key is gone once it ends)."""
    seen: list[float] = []
    stop = threading.Event()
    limiter = Limiter.from_settings(fleet.settings)

    def watch() -> None:
        while not stop.wait(0.01):
            until = limiter.status(downstream).paused_until
            if until is not None and until not in seen:
                seen.append(until)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        stop.set()
        watcher.join()


# The tests ----------------------------------------------------------------------------------


def test_a_rate_limit_holds_across_three_workers(fleet: Fleet) -> None:
    rate, burst, tasks = 10, 5, 150
    with ServerProcess(RATE_HOST, lambda s: s.script("/r", Reply(200, {"ok": True}))) as server:
        run = fleet.map(rt.call, [{"url": server.url("/r")} for _ in range(tasks)])
        summary = run.wait(timeout_s=90)
        times = sorted(hit.at for hit in server.hits("/r"))
    assert summary.succeeded == tasks, summary
    assert len(times) == tasks
    # The bucket admits its burst at once, then `rate` a second: the sustained rate is the
    # slope of the arrivals after the burst (a fit, so one late arrival does not move it).
    sustained = _sustained_rate(times[burst:])
    assert 0.9 * rate <= sustained <= 1.03 * rate, f"admitted {sustained:.2f}/s for a limit of {rate}/s"
    most, at = _max_in_window(times, 1.0)
    assert most <= rate + burst + ARRIVAL_JITTER_S * rate, f"{most} arrivals in the second from {at:.2f} s"
    # Most tasks found the bucket empty and were rescheduled to wait; none of it was a retry.
    assert summary.deferrals > 0 and summary.retries == 0


def test_a_concurrency_cap_holds_across_three_workers_and_stays_full(fleet: Fleet) -> None:
    cap, tasks, hold_s = 3, 30, 0.5
    reply = Reply(200, {"ok": True}, delay_s=hold_s)
    with ServerProcess(CAP_HOST, lambda s: s.script("/c", reply)) as server:
        run = fleet.map(rt.call, [{"url": server.url("/c")} for _ in range(tasks)])
        summary = run.wait(timeout_s=60)
        hits, spans = server.hits("/c"), server.spans("/c")
    assert summary.succeeded == tasks, summary
    assert max(hit.in_flight for hit in hits) <= cap, _open_at_worst(hits, spans)
    # Until the last round starts, the server should be busy with `cap` calls most of the
    # time: a freed slot is taken again within a wait hint (a fraction of the hold time),
    # though a loaded machine adds its own delays to every hand-over.
    start = min(s.start for s in spans)
    last_round = sorted(s.start for s in spans)[-cap]
    full_s = _time_at_level(spans, cap, start, last_round)
    assert full_s / (last_round - start) >= 0.6, (
        f"{cap} in flight only {full_s:.2f} s of {last_round - start:.2f} s"
    )


@pytest.mark.parametrize(
    "host", [PAUSED_LIMITED_HOST, PAUSED_FREE_HOST], ids=["limited-downstream", "unlimited-downstream"]
)
def test_one_429_pauses_the_downstream_for_every_worker(fleet: Fleet, host: str) -> None:
    pause_s, tasks, refuse_at = 2.0, 60, 10

    def configure(server: ScriptedServer) -> None:
        served = itertools.count(1)

        def answer(hit: Hit) -> Reply:
            if next(served) == refuse_at:
                return Reply(429, {"error": "slow down"}, headers={"retry-after": str(int(pause_s))})
            return Reply(200, {"ok": True}, delay_s=0.05)

        server.respond("/p", answer)

    with ServerProcess(host, configure) as server, _pause_watch(fleet, host) as pauses:
        run = fleet.map(rt.call, [{"url": server.url("/p")} for _ in range(tasks)])
        summary = run.wait(timeout_s=60)
        hits = server.hits("/p")
    assert summary.succeeded == tasks, summary
    assert summary.retries == 1, "only the task that saw the 429 retries; the others wait"
    assert pauses, "the 429 paused the downstream"
    until = pauses[0]
    landed = until - pause_s
    assert landed >= hits[refuse_at - 1].at, "the pause came with the 429"
    # Calls admitted before the pause landed may arrive during it, however late a loaded
    # machine makes them; no call begun after it landed may.
    during = [h for h in hits if landed <= h.at < until]
    late = [float(h.headers[rt.STARTED_HEADER]) - landed for h in during]
    assert all(started < 0 for started in late), f"calls begun {late} s after the pause arrived during it"
    assert max(h.at for h in hits) >= until, "the refused call was made again after the pause"
    assert len(hits) == tasks + 1


def test_waiting_does_not_use_up_retries(fleet: Fleet, redis_url: str, prefix: str) -> None:
    # The test holds the downstream's only slot, so both tasks are deferred again and again
    # (as many times as the test likes: a token bucket would hand the task a token on its own
    # schedule). Then one meets two 500s and succeeds on its last retry, the other fails after
    # exactly its two retries. Had the waits counted, neither would have got that far.
    def configure(server: ScriptedServer) -> None:
        server.script("/flaky", Reply(500), Reply(500), Reply(200, {"ok": True}))
        server.script("/broken", Reply(500))

    client = redis.Redis.from_url(redis_url)
    holder = Limiter(
        client, prefix=prefix, limits={BUDGET_HOST: LimitSpec(max_concurrency=1)}, default=LimitSpec()
    )
    permit = holder.acquire(BUDGET_HOST)
    try:
        with ServerProcess(BUDGET_HOST, configure) as server:
            flaky = fleet.map(rt.call_with_two_retries, [{"url": server.url("/flaky")}])
            broken = fleet.map(rt.call_with_two_retries, [{"url": server.url("/broken")}])
            deadline = time.monotonic() + 40
            while min(flaky.summary().deferrals, broken.summary().deferrals) < 5:
                assert time.monotonic() < deadline, "the tasks were not deferred five times"
                time.sleep(0.1)
            assert server.hits("/flaky") == [] and server.hits("/broken") == []
            permit.release()
            flaky_summary, broken_summary = flaky.wait(timeout_s=30), broken.wait(timeout_s=30)
            calls = (len(server.hits("/flaky")), len(server.hits("/broken")))
    finally:
        permit.release()
        client.close()
    flaky_out, broken_out = flaky.outcomes()[0], broken.outcomes()[0]
    assert calls == (3, 3)
    assert flaky_out.ok and flaky_out.attempts == 3, flaky_out
    assert not broken_out.ok and broken_out.attempts == 3, broken_out
    assert flaky_summary.deferrals >= 5 and flaky_summary.retries == 2
    assert broken_summary.deferrals >= 5 and broken_summary.retries == 2


def test_a_burst_of_dispatches_meets_no_429_storm(fleet: Fleet) -> None:
    # The vendor refuses anything above its limit in a sliding second. Without the limiter the
    # cluster would pour the burst in as fast as it can; a per-worker limit would triple it.
    tasks, observe_s = 1000, 3.0
    vendor_limit = STORM_RATE + STORM_BURST + ARRIVAL_JITTER_S * STORM_RATE

    def configure(server: ScriptedServer) -> None:
        window: collections.deque[float] = collections.deque()

        def answer(hit: Hit) -> Reply:
            window.append(hit.at)
            while hit.at - window[0] >= 1.0:
                window.popleft()
            if len(window) > vendor_limit:
                return Reply(429, {"error": "too many"}, headers={"retry-after": "1"})
            return Reply(200, {"ok": True})

        server.respond("/s", answer)

    with ServerProcess(STORM_HOST, configure) as server:
        run = fleet.map(rt.call, [{"url": server.url("/s")} for _ in range(tasks)])
        first = server.wait_for_hits("/s", 1, timeout_s=30)[0].at
        # A few seconds show the admitted rate; the rest of the burst is cancelled, not waited for.
        time.sleep(max(0.0, first + observe_s - time.time()))
        run.cancel()
        summary = run.wait(timeout_s=60)
        spans = server.spans("/s")
    refused = [s for s in spans if s.status == 429]
    assert refused == [], f"{len(refused)} of {len(spans)} requests were refused with 429"
    assert summary.failed == 0 and summary.timed_out == 0, summary
    assert summary.succeeded == len(spans) and summary.succeeded + summary.cancelled == tasks
    times = sorted(s.start for s in spans if s.start < first + observe_s)
    first_second = sum(1 for t in times if t < first + 1.0)
    assert first_second >= 0.8 * STORM_RATE, f"only {first_second} requests in the first second"
    most, at = _max_in_window(times, 1.0)
    assert most <= vendor_limit, f"{most} arrivals in the second from {at:.2f} s"
    sustained = _sustained_rate(times[STORM_BURST:])
    assert 0.85 * STORM_RATE <= sustained <= 1.1 * STORM_RATE, f"admitted {sustained:.1f}/s"


def test_a_killed_worker_gives_its_slot_back_within_the_lease_ttl(redis_url: str) -> None:
    prefix = f"trk{uuid.uuid4().hex[:8]}"
    # A short visibility timeout, so the killed worker's task comes back soon.
    env = _env(
        prefix,
        AGENTFLEET_VISIBILITY_TIMEOUT_S="10",
        AGENTFLEET_UNACKED_RESTORE_INTERVAL_S="1",
        AGENTFLEET_TASK_TIME_LIMIT_S="8",
        AGENTFLEET_TASK_SOFT_TIME_LIMIT_S="7",
    )
    settings = load_settings(
        key_prefix=prefix,
        visibility_timeout_s=10,
        task_time_limit_s=8,
        task_soft_time_limit_s=7,
        queues=_queues(prefix),
    )
    tasks, hold_s = 4, 0.5
    reply = Reply(200, {"ok": True}, delay_s=hold_s)
    with (
        LocalCluster(
            workers=3, concurrency=2, pool="threads", broker_url=redis_url, env=env, settings=settings
        ) as cluster,
        ServerProcess(KILL_HOST, lambda s: s.script("/k", reply)) as server,
    ):
        run = cluster.fleet().map(rt.call, [{"url": server.url("/k")} for _ in range(tasks)])
        first = server.wait_for_hits("/k", 1, timeout_s=30)[0]
        holder = next(w for w in cluster.workers if w.pid == int(first.headers[rt.PID_HEADER]))
        cluster.kill_worker(holder)
        killed_at = time.time()
        following = [h for h in server.wait_for_hits("/k", 2, timeout_s=30) if h.at > killed_at]
        assert following, "no request came after the kill"
        came_back_s = following[0].at - killed_at
        summary = run.wait(timeout_s=60)
        hits = server.hits("/k")
    assert came_back_s <= LEASE_TTL_S + 1.0, f"the slot came back {came_back_s:.2f} s after the kill"
    assert summary.succeeded == tasks, summary
    assert max(h.in_flight for h in hits) == 1
    # The killed call is made again on redelivery: one request more than there are tasks.
    assert len(hits) == tasks + 1
