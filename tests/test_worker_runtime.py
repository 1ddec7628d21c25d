"""The worker runtime: one per process and settings, built once, torn down once, never
carried into a forked child; one lease renewer thread for claims and permits."""

from __future__ import annotations

import os
import threading
import time

import pytest
import redis

from agentfleet.config import LimitSpec, Settings, load_settings
from agentfleet.runs import take_lock
from agentfleet.tasks.runtime import WorkerRuntime, runtime


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(broker_url=redis_url, key_prefix=key_prefix)


def test_runtimes_belong_to_one_settings_object_even_when_ids_are_reused() -> None:
    # Settings made and dropped in turn tend to land at the same address.
    made = [runtime(load_settings(key_prefix=f"p{i}")) for i in range(20)]
    assert len({id(rt) for rt in made}) == 20


def test_each_settings_object_gets_the_run_store_of_its_own_prefix() -> None:
    stores = [runtime(load_settings(key_prefix=f"q{i}")).runs for i in range(20)]
    assert [store.prefix for store in stores] == [f"q{i}" for i in range(20)]


def test_the_same_settings_get_the_same_runtime() -> None:
    settings = load_settings(key_prefix="same")
    assert runtime(settings) is runtime(settings)


def test_claims_and_permits_are_renewed_by_one_thread(settings: Settings, redis_client: redis.Redis) -> None:
    rt = WorkerRuntime(settings.model_copy(update={"limits": {"v.example": LimitSpec(max_concurrency=5)}}))
    assert rt.limiter._renewer is rt.leases and rt.claims.leases is rt.leases
    before = threading.active_count()
    permit = rt.limiter.acquire("v.example", max_wait_s=0)
    rt.claims.hold(rt.runs, "k0", "w:1:a", 30.0)
    try:
        assert rt.leases.tracked() == 2
        assert threading.active_count() == before + 1
    finally:
        permit.release()
        rt.claims.drop(rt.runs, "k0")


def test_a_claim_is_renewed_through_the_shared_renewer(settings: Settings, redis_client: redis.Redis) -> None:
    rt = WorkerRuntime(settings)
    key = rt.runs.claim_key("k1")
    redis_client.set(key, "w:1:a", px=1500)
    claim = rt.claims.hold(rt.runs, "k1", "w:1:a", 1.5)
    try:
        time.sleep(2.5)
        assert redis_client.get(key) == "w:1:a"
        assert not claim.lost
    finally:
        rt.claims.drop(rt.runs, "k1")
        rt.runs.release_claim("k1", "w:1:a")


def test_a_lock_is_taken_once_extended_by_its_holder_and_free_after_release(settings: Settings) -> None:
    runs = WorkerRuntime(settings).runs
    assert take_lock(runs, "lock-a", "w:1:a", 5.0)
    assert not take_lock(runs, "lock-a", "w:2:b", 5.0), "another token waits"
    assert take_lock(runs, "lock-a", "w:1:a", 5.0), "its holder extends it"
    runs.release_claim("lock-a", "w:1:a")
    assert take_lock(runs, "lock-a", "w:2:b", 5.0)
    runs.release_claim("lock-a", "w:2:b")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_forked_child_builds_a_runtime_of_its_own() -> None:
    settings = load_settings(key_prefix="forked")
    parent = runtime(settings)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report whether it got a fresh runtime, then leave at once
        try:
            fresh = runtime(settings) is not parent
            os.write(write, b"1" if fresh else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert runtime(settings) is parent


class _Lease:
    """A lease due in an hour that counts its renewals."""

    def __init__(self) -> None:
        self.renew_due = time.monotonic() + 3600
        self.renewals = 0

    def renew(self) -> bool:
        self.renewals += 1
        self.renew_due = time.monotonic() + 3600
        return True


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX")
def test_a_renewer_carried_into_a_forked_child_keeps_none_of_its_parents_leases() -> None:
    from agentfleet.leases import LeaseRenewer

    renewer = LeaseRenewer()
    held = _Lease()
    renewer.track(held)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: tracking starts afresh; forgetting a parent's lease changes nothing
        try:
            own = _Lease()  # held weakly: keep it alive
            renewer.track(own)
            alive = renewer._thread is not None and renewer._thread.is_alive()
            tracked = renewer.tracked()
            renewer.forget(held)
            os.write(write, f"{tracked}{int(alive)}{renewer.tracked()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 3) == b"111", "one lease (the child's own) and a thread of its own"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert renewer.tracked() == 1, "the parent still renews its own"
