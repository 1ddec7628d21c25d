"""Calls sent again after a dropped connection count nothing twice.

A proxy between the client and a real Redis forwards a command, throws its reply away and cuts
the connection: the command ran, the client saw a dropped connection. redis-py sends it again
(a few times within a second), and past that ``Patience`` does; either way a run counter moves
once, a failed attempt is recorded once and a delivery is counted once. The same cut doubles a
plain ``HINCRBY``: the hazard is real. Calls not marked ``@repeatable`` are refused before
anything is sent.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis
from cutting_proxy import CuttingProxy

from agentfleet.dlq.model import AttemptRecord
from agentfleet.outages import Patience, is_repeatable, repeatable
from agentfleet.redis_client import RedisTarget, connect
from agentfleet.redis_handles import StateRedis
from agentfleet.runs import RunStore
from agentfleet.runs.dispatching import DispatchRecord
from agentfleet.tasks.batch import _claim_all

# Who sends a command again after its reply was lost: redis-py's own retry (three, within about
# a second), or, with that off, ``Patience``.
RESENDERS = {"redis-py": 3, "Patience": 0}


@pytest.fixture
def proxy(redis_url: str) -> Iterator[CuttingProxy]:
    parts = urlsplit(redis_url)
    with CuttingProxy((parts.hostname or "127.0.0.1", parts.port or 6379)) as running:
        yield running


def _via(redis_url: str, proxy: CuttingProxy) -> str:
    parts = urlsplit(redis_url)
    userinfo = parts.netloc.rpartition("@")[0]
    return parts._replace(
        netloc=f"{userinfo}@127.0.0.1:{proxy.port}" if userinfo else f"127.0.0.1:{proxy.port}"
    ).geturl()


def _stores(redis_url: str, proxy: CuttingProxy, key_prefix: str, retries: int) -> tuple[RunStore, RunStore]:
    """The run store through the proxy, and the same store riding out outages as workers do."""
    via = _via(redis_url, proxy)
    store = RunStore(StateRedis(connect(RedisTarget(via, retries=retries))), prefix=key_prefix)
    return store, Patience(10.0, via).wrap(store)


def _run(store: RunStore) -> tuple[str, str]:
    run_id = uuid.uuid4().hex[:16]
    key = f"{run_id}:0:ab12"
    store.create_run(run_id, name="n", kind="map", task="t", items=[(f"{run_id}-0", key, "0")], inputs=[{}])
    return run_id, key


@pytest.mark.parametrize("resender", RESENDERS)
def test_a_run_counter_whose_reply_was_lost_moves_once(
    resender: str, redis_url: str, redis_client: redis.Redis, proxy: CuttingProxy, key_prefix: str
) -> None:
    store, patient = _stores(redis_url, proxy, key_prefix, RESENDERS[resender])
    run_id, _ = _run(store)
    patient.incr(run_id, "warm", event="w")  # the script is loaded: the cut meets the count itself
    proxy.arm(store.run_key(run_id, "counted").encode())
    patient.incr(run_id, "retries", event="t-0 0:0:0")
    assert proxy.cuts == 1
    assert redis_client.hget(store.run_key(run_id), "retries") == "1"


@pytest.mark.parametrize("resender", RESENDERS)
def test_a_failed_attempt_whose_reply_was_lost_is_recorded_once(
    resender: str, redis_url: str, redis_client: redis.Redis, proxy: CuttingProxy, key_prefix: str
) -> None:
    store, patient = _stores(redis_url, proxy, key_prefix, RESENDERS[resender])
    _, key = _run(store)
    patient.add_attempt_error(f"{key}-warm", {"attempt": 0})
    record = AttemptRecord(
        attempt=1, error_type="Overloaded", category="overloaded", message="529"
    ).model_dump()
    proxy.arm(store.keys.item("errs", key).encode())
    patient.add_attempt_error(key, record)
    assert proxy.cuts == 1
    assert redis_client.llen(store.keys.item("errs", key)) == 1
    assert store.attempt_errors(key) == [record]


@pytest.mark.parametrize("resender", RESENDERS)
def test_a_delivery_whose_start_reply_was_lost_is_counted_once(
    resender: str, redis_url: str, redis_client: redis.Redis, proxy: CuttingProxy, key_prefix: str
) -> None:
    store, patient = _stores(redis_url, proxy, key_prefix, RESENDERS[resender])
    warm_run, warm_key = _run(store)
    patient.begin(warm_run, warm_key, f"{warm_run}-0", deliveries_ttl_s=60, token="w:1:w", claim_ttl_s=20)
    run_id, key = _run(store)
    deliveries = store.keys.deliveries(key, f"{run_id}-0")
    proxy.arm(deliveries.encode())
    begun = patient.begin(run_id, key, f"{run_id}-0", deliveries_ttl_s=60, token="w:1:a", claim_ttl_s=20)
    assert proxy.cuts == 1
    assert (begun.verdict, begun.deliveries) == ("claimed", 1)
    assert redis_client.get(deliveries) == "1"
    # Another delivery (another token) is another count.
    store.release_claim(key, "w:1:a")
    again = store.begin(run_id, key, f"{run_id}-0", deliveries_ttl_s=60, token="w:2:b", claim_ttl_s=20)
    assert again.deliveries == 2


def test_the_same_cut_counts_a_plain_hincrby_twice(
    redis_url: str, redis_client: redis.Redis, proxy: CuttingProxy, key_prefix: str
) -> None:
    client = connect(RedisTarget(_via(redis_url, proxy)))
    proxy.arm(f"{key_prefix}:plain".encode())
    client.hincrby(f"{key_prefix}:plain", "n", 1)
    assert proxy.cuts == 1
    assert redis_client.hget(f"{key_prefix}:plain", "n") == "2"


def test_a_counter_moves_once_per_event(redis_client: redis.Redis, key_prefix: str) -> None:
    store = RunStore(StateRedis(redis_client), prefix=key_prefix)
    run_id, _ = _run(store)
    assert store.incr(run_id, "recovered", event="a")
    assert not store.incr(run_id, "recovered", event="a")
    assert store.incr(run_id, "recovered", event="b")
    assert store.incr(run_id, "deferrals", event="a"), "an event id counts once per counter"
    assert (store.get_run(run_id)["recovered"], store.get_run(run_id)["deferrals"]) == ("2", "1")


def test_a_run_created_twice_is_counted_as_started_once(redis_client: redis.Redis, key_prefix: str) -> None:
    store = RunStore(StateRedis(redis_client), prefix=key_prefix)
    run_id = uuid.uuid4().hex[:16]
    for _ in range(2):
        store.create_run(run_id, name="n", kind="map", task="t", items=[], created_at=time.time())
    assert store.completion_stats().totals["runs_started"] == 1
    assert store.completion_stats().totals["runs_finished"] == 1


def test_a_dispatch_record_closed_twice_ends_its_run_once(redis_client: redis.Redis, key_prefix: str) -> None:
    store = RunStore(StateRedis(redis_client), prefix=key_prefix)
    record = DispatchRecord(store)
    run_id = uuid.uuid4().hex[:16]
    record.open(
        run_id,
        name="n",
        kind="map",
        task="t",
        queues=["q"],
        aggregate=None,
        fail_fast=False,
        max_in_flight=None,
        extra={},
        promise_s=30,
    )
    assert record.close(run_id, 0).run_ended
    assert not record.close(run_id, 0).run_ended
    ends = [fields for _, fields in store.events(run_id) if fields.get("kind") == "end"]
    assert len(ends) == 1


def test_patience_refuses_a_function_not_marked_repeatable_before_calling_it() -> None:
    called: list[int] = []
    with pytest.raises(TypeError, match="not marked @repeatable"):
        Patience(1.0, "redis://localhost:6379").call(called.append, 1)
    assert called == []


def test_a_wrapped_object_refuses_its_methods_not_marked_repeatable() -> None:
    class Ledger:
        def __init__(self) -> None:
            self.added = 0

        @repeatable
        def read(self) -> int:
            return self.added

        def add(self) -> None:
            self.added += 1

    ledger = Ledger()
    patient = Patience(1.0, "redis://localhost:6379").wrap(ledger)
    assert patient.read() == 0
    with pytest.raises(TypeError, match=r"Ledger\.add is not marked @repeatable"):
        patient.add()
    assert ledger.added == 0


def test_patience_calls_again_after_a_dropped_connection_until_it_answers() -> None:
    answers = iter([redis.ConnectionError("dropped"), redis.TimeoutError("slow"), 7])

    @repeatable
    def flaky() -> int:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert Patience(5.0, "redis://localhost:6379", sleep=lambda _: None).call(flaky) == 7


def test_every_public_method_of_the_run_store_is_repeatable() -> None:
    methods = [
        name for name, member in inspect.getmembers(RunStore, inspect.isfunction) if not name.startswith("_")
    ]
    assert methods, "the run store has methods"
    assert [name for name in methods if not is_repeatable(getattr(RunStore, name))] == []


def test_a_batch_claiming_its_items_twice_holds_them_all_and_no_one_elses(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    store = RunStore(StateRedis(redis_client), prefix=key_prefix)
    keys = [f"{uuid.uuid4().hex[:16]}:{n}:ab12" for n in range(3)]
    redis_client.set(store.claim_key(keys[2]), "other:1:x", px=20_000)
    assert _claim_all(store, keys, "w:1:batch", 20.0) == keys[:2]
    assert _claim_all(store, keys, "w:1:batch", 20.0) == keys[:2], "sent again, it still holds its own"
