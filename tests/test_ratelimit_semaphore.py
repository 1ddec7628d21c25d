"""Concurrency caps: leases that expire, renew, release once, and never exceed the cap."""

from __future__ import annotations

import gc
import multiprocessing
import threading
import time
from collections.abc import Iterator

import fakeredis
import pytest
import redis
from ratelimit_support import StoppedRenewer, make_limiter

from agentfleet.config import LimitSpec
from agentfleet.errors import Deferred
from agentfleet.leases import LeaseRenewer
from agentfleet.ratelimit import FLEET

CAPPED = {"v.example": LimitSpec(max_concurrency=1)}


@pytest.fixture(params=["redis", "fakeredis"])
def client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[redis.Redis]:
    """A real Redis, and fakeredis running the same Lua."""
    if request.param == "redis":
        real = redis.Redis.from_url(redis_url, decode_responses=True)
        yield real
        real.close()
    else:
        yield fakeredis.FakeRedis(decode_responses=True)


def test_a_full_semaphore_defers(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, {"v.example": LimitSpec(max_concurrency=2)})
    limiter.acquire("v.example", max_wait_s=0)
    limiter.acquire("v.example", max_wait_s=0)
    with pytest.raises(Deferred) as refused:
        limiter.acquire("v.example", max_wait_s=0)
    assert "concurrency" in str(refused.value)
    assert limiter.status("v.example").slots_in_use == 2


def test_release_frees_the_slot_and_is_idempotent(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, {"v.example": LimitSpec(max_concurrency=2)})
    first = limiter.acquire("v.example", max_wait_s=0)
    limiter.acquire("v.example", max_wait_s=0)
    first.release()
    first.release()
    assert limiter.status("v.example").slots_in_use == 1
    limiter.acquire("v.example", max_wait_s=0)
    first.release()
    assert limiter.status("v.example").slots_in_use == 2


def test_permit_as_context_manager_releases(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, CAPPED)
    with limiter.acquire("v.example", max_wait_s=0) as permit:
        assert permit.holds_lease
    assert permit.released
    limiter.acquire("v.example", max_wait_s=0)


def test_a_holder_that_never_releases_loses_the_slot_after_the_ttl(
    client: redis.Redis, key_prefix: str
) -> None:
    dead = make_limiter(client, key_prefix, CAPPED, lease_ttl_s=0.3, renewer=StoppedRenewer())
    alive = make_limiter(client, key_prefix, CAPPED, lease_ttl_s=0.3)
    dead.acquire("v.example", max_wait_s=0)
    with pytest.raises(Deferred) as refused:
        alive.acquire("v.example", max_wait_s=0)
    assert refused.value.wait_s <= 0.3
    assert alive.status("v.example").leases_reclaimed == 0
    time.sleep(0.32)
    alive.acquire("v.example", max_wait_s=0).release()
    assert alive.status("v.example").leases_reclaimed == 1, "the taken-back lease is counted"
    alive.acquire("v.example", max_wait_s=0).release()
    assert alive.status("v.example").leases_reclaimed == 1, "a released lease is not"


def test_an_expired_lease_frees_its_slot_while_others_are_held(client: redis.Redis, key_prefix: str) -> None:
    limits = {"v.example": LimitSpec(max_concurrency=2)}
    dead = make_limiter(client, key_prefix, limits, lease_ttl_s=0.2, renewer=StoppedRenewer())
    alive = make_limiter(client, key_prefix, limits, lease_ttl_s=30)
    dead.acquire("v.example", max_wait_s=0)
    alive.acquire("v.example", max_wait_s=0)
    with pytest.raises(Deferred):
        alive.acquire("v.example", max_wait_s=0)
    time.sleep(0.25)
    alive.acquire("v.example", max_wait_s=0)
    assert alive.status("v.example").slots_in_use == 2


def test_renew_keeps_the_lease(client: redis.Redis, key_prefix: str) -> None:
    holder = make_limiter(client, key_prefix, CAPPED, lease_ttl_s=0.5, renewer=StoppedRenewer())
    other = make_limiter(client, key_prefix, CAPPED, lease_ttl_s=0.5)
    permit = holder.acquire("v.example", max_wait_s=0)
    for _ in range(4):
        time.sleep(0.2)
        assert permit.renew()
    with pytest.raises(Deferred):
        other.acquire("v.example", max_wait_s=0)


def test_an_expired_lease_is_not_renewed_back(client: redis.Redis, key_prefix: str) -> None:
    holder = make_limiter(client, key_prefix, CAPPED, lease_ttl_s=0.1, renewer=StoppedRenewer())
    permit = holder.acquire("v.example", max_wait_s=0)
    time.sleep(0.15)
    taker = holder.acquire("v.example", max_wait_s=0)
    assert not permit.renew()
    assert taker.renew()
    assert holder.status("v.example").slots_in_use == 1


def test_the_background_renewer_keeps_long_calls_alive(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, CAPPED, lease_ttl_s=0.3, renewer=LeaseRenewer())
    with limiter.acquire("v.example", max_wait_s=0):
        time.sleep(1.0)
        with pytest.raises(Deferred):
            limiter.acquire("v.example", max_wait_s=0)
    limiter.acquire("v.example", max_wait_s=0)


def test_a_dropped_permit_is_not_renewed(client: redis.Redis, key_prefix: str) -> None:
    renewer = LeaseRenewer()
    limiter = make_limiter(client, key_prefix, CAPPED, lease_ttl_s=0.3, renewer=renewer)
    limiter.acquire("v.example", max_wait_s=0)
    gc.collect()
    assert renewer.tracked() == 0
    time.sleep(0.35)
    limiter.acquire("v.example", max_wait_s=0)


def test_one_renewer_thread_serves_every_lease(client: redis.Redis, key_prefix: str) -> None:
    renewer = LeaseRenewer()
    limiter = make_limiter(client, key_prefix, {"v.example": LimitSpec(max_concurrency=10)}, renewer=renewer)
    before = threading.active_count()
    permits = [limiter.acquire("v.example", max_wait_s=0) for _ in range(5)]
    assert renewer.tracked() == 5
    assert threading.active_count() == before + 1
    for permit in permits:
        permit.release()
    assert renewer.tracked() == 0


def test_max_parallelism_caps_calls_across_downstreams(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, max_parallelism=2)
    first = limiter.acquire("a.example", max_wait_s=0)
    limiter.acquire("b.example", max_wait_s=0)
    with pytest.raises(Deferred) as refused:
        limiter.acquire("c.example", max_wait_s=0)
    assert FLEET in str(refused.value)
    first.release()
    limiter.acquire("c.example", max_wait_s=0)
    status = limiter.status(FLEET)
    assert (status.slots_in_use, status.max_slots) == (2, 2)


def test_a_refusal_later_in_line_leaks_no_lease(client: redis.Redis, key_prefix: str) -> None:
    limits = {"v.example": LimitSpec(max_concurrency=5, rate_per_s=0.5, burst=1)}
    limiter = make_limiter(client, key_prefix, limits, max_parallelism=10)
    limiter.acquire("v.example", max_wait_s=0)
    for _ in range(3):
        with pytest.raises(Deferred) as refused:
            limiter.acquire("v.example", max_wait_s=0)
        assert "rate bucket" in str(refused.value)
    assert limiter.status("v.example").slots_in_use == 1
    assert limiter.status(FLEET).slots_in_use == 1


def test_the_wait_hint_follows_how_long_slots_are_held(client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(client, key_prefix, CAPPED, lease_ttl_s=30)
    for _ in range(3):
        with limiter.acquire("v.example", max_wait_s=0):
            time.sleep(0.2)
    limiter.acquire("v.example", max_wait_s=0)
    with pytest.raises(Deferred) as refused:
        limiter.acquire("v.example", max_wait_s=0)
    # One holder that holds about 0.2 s is expected to leave in about half of that.
    assert 0.05 <= refused.value.wait_s <= 0.2


def test_threads_never_exceed_max_concurrency(redis_client: redis.Redis, key_prefix: str) -> None:
    limiter = make_limiter(redis_client, key_prefix, {"v.example": LimitSpec(max_concurrency=3)})
    lock = threading.Lock()
    in_flight = 0
    peak = 0
    errors: list[BaseException] = []

    def worker() -> None:
        nonlocal in_flight, peak
        try:
            for _ in range(5):
                with limiter.acquire("v.example", max_wait_s=10):
                    with lock:
                        in_flight += 1
                        peak = max(peak, in_flight)
                    time.sleep(0.02)
                    with lock:
                        in_flight -= 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert peak == 3
    assert limiter.status("v.example").slots_in_use == 0


def _hold_slots(url: str, prefix: str, rounds: int, spans: multiprocessing.Queue) -> None:
    client = redis.Redis.from_url(url)
    limiter = make_limiter(client, prefix, {"v.example": LimitSpec(max_concurrency=2)})
    held = []
    for _ in range(rounds):
        with limiter.acquire("v.example", max_wait_s=30):
            start = time.time()
            time.sleep(0.03)
            held.append((start, time.time()))
    spans.put(held)


def test_processes_never_exceed_max_concurrency(redis_url: str, key_prefix: str) -> None:
    context = multiprocessing.get_context("fork")
    spans: multiprocessing.Queue = context.Queue()
    workers = [context.Process(target=_hold_slots, args=(redis_url, key_prefix, 6, spans)) for _ in range(4)]
    for worker in workers:
        worker.start()
    held = [span for _ in workers for span in spans.get(timeout=60)]
    for worker in workers:
        worker.join(timeout=10)
    # Each span lies inside its holder's lease, so overlapping spans never exceed the cap.
    events = sorted([(start, 1) for start, _ in held] + [(end, -1) for _, end in held])
    in_flight = peak = 0
    for _, step in events:
        in_flight += step
        peak = max(peak, in_flight)
    assert len(held) == 24
    assert peak == 2
