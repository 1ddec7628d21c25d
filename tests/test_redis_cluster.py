"""agentfleet's state on a real Redis Cluster (three masters on loopback), the broker apart.

The broker stays a plain Redis (kombu has no cluster transport); ``state_url`` puts the run
store, the dead-letter queue, the limiter and the circuit breakers on the cluster. Every key a
script touches carries a hash tag, so no script is refused for crossing slots, and runs spread
over the masters. Lost messages of every kind come back, and the stale copies a dead worker
left on the broker are dropped there (kombu's ``unacked`` keys are not on the cluster).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import fleet_test_tasks as tt
import pytest
import redis
from cluster_support import RedisClusterGroup
from fault_support import Effects, fault_cluster, wait_until
from stranded import KINDS, forget, lose, two_passes, waiting_ids
from worker_env import cluster_env, own_queues

from agentfleet import LocalCluster, Node
from agentfleet.config import LimitSpec, Settings, load_settings
from agentfleet.dlq.filters import DLQFilter
from agentfleet.dlq.model import DeadLetter
from agentfleet.dlq.store import DLQStore
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.idempotency import default_item_key
from agentfleet.models import TaskOutcome
from agentfleet.orchestration import Fleet
from agentfleet.ratelimit import Limiter
from agentfleet.ratelimit.circuit import OPEN, CircuitBreaker
from agentfleet.redis_client import connect
from agentfleet.runs import (
    BudgetLedger,
    Caps,
    GraphSpec,
    GraphState,
    MemoryStore,
    Report,
    RunStore,
    Spend,
    StepSpec,
    UndoLog,
)
from agentfleet.spend import SpendLedger
from agentfleet.transport.layout import UNACKED, UNACKED_INDEX

pytestmark = pytest.mark.slow

PASSWORD = "cluster-pw"


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterGroup]:
    with RedisClusterGroup(masters=3, password=PASSWORD) as group:
        yield group


@pytest.fixture(scope="module")
def settings(redis_cluster: RedisClusterGroup, redis_url: str) -> Settings:
    tag = uuid.uuid4().hex[:8]
    return load_settings(
        broker_url=redis_url,
        state_url=redis_cluster.url,
        key_prefix=f"cl{tag}",
        queues={"agents": f"cl{tag}.agents", "fanin": f"cl{tag}.fanin", "maintenance": f"cl{tag}.m"},
        delivery={"reconcile_interval_s": 0.5, "reconcile_grace_s": 1.0},
    )


@pytest.fixture(scope="module")
def state(settings: Settings) -> Any:
    return connect(settings.redis_target())


@pytest.fixture
def own(settings: Settings) -> Settings:
    """The cluster's settings under a prefix of its own: runs made here by hand (never
    published) stay out of the workers' reconciler's sight."""
    return settings.model_copy(update={"key_prefix": f"own{uuid.uuid4().hex[:8]}"})


@pytest.fixture(scope="module")
def cluster(settings: Settings) -> Iterator[LocalCluster]:
    env = cluster_env(
        AGENTFLEET_DELIVERY__RECONCILE_INTERVAL_S="0.5",
        AGENTFLEET_DELIVERY__RECONCILE_GRACE_S="1",
    )
    with LocalCluster(
        workers=2, concurrency=4, pool="threads", env=env, settings=settings, broker_url=settings.broker_url
    ) as running:
        yield running


def _outcome(run_id: str, idx: int, key: str) -> TaskOutcome:
    return TaskOutcome(
        task_id=f"{run_id}-{idx}",
        run_id=run_id,
        item_key=key,
        index=idx,
        idempotency_key=key,
        ok=True,
        result={},
    )


def test_a_state_url_naming_the_cluster_reaches_every_master(state: Any) -> None:
    assert isinstance(state, redis.RedisCluster)
    assert len(state.get_primaries()) == 3


def test_an_item_with_a_given_key_starts_and_finishes_across_slots(own: Settings, state: Any) -> None:
    store = RunStore.from_settings(own, state)
    key = f"invoice-{uuid.uuid4().hex[:6]}"
    run_id = uuid.uuid4().hex[:16]
    store.create_run(run_id, name="n", kind="map", task="t", items=[(f"{run_id}-0", key, key)], inputs=[{}])
    begun = store.begin(run_id, key, f"{run_id}-0", deliveries_ttl_s=60, token="w:1:a", claim_ttl_s=20)
    assert begun.verdict == "claimed" and begun.deliveries == 1
    again = store.begin(run_id, key, f"{run_id}-0", deliveries_ttl_s=60, token="w:2:b", claim_ttl_s=20)
    assert again.verdict == "busy"
    finished = store.finish(_outcome(run_id, 0, key), token="w:1:a")
    assert finished.recorded and finished.run_ended
    assert not store.live_claims([key])[0]
    # Another run of the same key finds the stored outcome.
    later = uuid.uuid4().hex[:16]
    store.create_run(later, name="n", kind="map", task="t", items=[(f"{later}-0", key, key)], inputs=[{}])
    found = store.begin(later, key, f"{later}-0", deliveries_ttl_s=60, token="w:3:c", claim_ttl_s=20)
    assert found.verdict == "stored"


def test_a_cancelled_run_gives_back_the_claim_of_an_item_in_another_slot(own: Settings, state: Any) -> None:
    store = RunStore.from_settings(own, state)
    key = f"order-{uuid.uuid4().hex[:6]}"
    run_id = uuid.uuid4().hex[:16]
    store.create_run(run_id, name="n", kind="map", task="t", items=[(f"{run_id}-0", key, key)], inputs=[{}])
    store.cancel(run_id)
    begun = store.begin(run_id, key, f"{run_id}-0", deliveries_ttl_s=60, token="w:1:a", claim_ttl_s=20)
    assert begun.verdict == "cancelled"
    assert store.live_claims([key]) == [False]


def test_claims_in_many_slots_are_renewed_together(own: Settings, state: Any) -> None:
    store = RunStore.from_settings(own, state)
    held = {f"k{n}-{uuid.uuid4().hex[:4]}": f"w:1:{n}" for n in range(12)}
    for key, token in held.items():
        state.set(store.claim_key(key), token, px=1000)
    assert len({state.keyslot(store.claim_key(k)) for k in held}) > 1
    kept = store.renew_claims(held, 30.0)
    assert all(kept.values()) and all(state.pttl(store.claim_key(k)) > 5000 for k in held)


def test_dead_letters_are_written_indexed_and_removed_on_the_cluster(own: Settings, state: Any) -> None:
    dlq = DLQStore.from_settings(own, state)
    entry = DeadLetter(
        id=uuid.uuid4().hex[:12],
        task_name="t.broken",
        task_id="r-0",
        run_id="r",
        item_key="0",
        idempotency_key="r:0:x",
        inputs={"n": 1},
        error_type="BadRequest",
        error="400 from vendor",
        category="bad_request",
        fingerprint="f1",
        attempts=1,
        first_failure_at=time.time(),
        last_failure_at=time.time(),
    )
    assert dlq.add(entry)
    assert [e.id for e in dlq.find(DLQFilter(category="bad_request"))] == [entry.id]
    assert dlq.remove([entry.id]) == [entry.id]
    assert dlq.find(DLQFilter(category="bad_request")) == []


def test_the_limiter_and_the_circuit_breaker_work_on_the_cluster(own: Settings, state: Any) -> None:
    limited = own.model_copy(update={"limits": {"v.example": LimitSpec(max_concurrency=1, rate_per_s=50)}})
    limiter = Limiter.from_settings(limited, state)
    permit = limiter.acquire("v.example")
    assert limiter.status("v.example").slots_in_use == 1
    permit.release()
    breaker = CircuitBreaker.from_settings(own, state)
    for _ in range(own.dlq.vendor_issue_failures):
        breaker.record_failure("down.example")
    assert breaker.state("down.example").state == OPEN


def test_runs_finish_on_workers_whose_state_is_the_cluster(cluster: LocalCluster) -> None:
    fleet = cluster.fleet()
    summary = fleet.map("fleet_test_tasks.echo", [{"n": n} for n in range(20)]).wait(timeout_s=120)
    assert summary.succeeded == 20
    keyed = fleet.map(
        "fleet_test_tasks.echo",
        [{"n": n} for n in range(5)],
        key=lambda i: f"k-{uuid.uuid4().hex[:6]}-{i['n']}",
    )
    assert keyed.wait(timeout_s=120).succeeded == 5
    urls = [{"url": f"https://site.example/{n}"} for n in range(4)]
    staged = fleet.pipeline(
        ["fleet_test_tasks.stage_fetch", "fleet_test_tasks.stage_extract", "fleet_test_tasks.stage_report"],
        urls,
    )
    assert staged.wait(timeout_s=120).succeeded == 4
    assert (
        fleet.map("fleet_test_tasks.echo", [{"n": 1}], aggregate="fleet_test_tasks:count_results").result(
            timeout_s=60
        )
        == 1
    )


def test_a_failed_item_is_dead_lettered_on_the_cluster(cluster: LocalCluster) -> None:
    fleet = cluster.fleet()
    run = fleet.map("fleet_test_tasks.maybe_fail", [{"n": 1, "fail": True}])
    summary = run.wait(timeout_s=120)
    assert summary.dead_lettered == 1
    assert [e.run_id for e in fleet.dlq.list(run_id=run.id)] == [run.id]


def test_the_reconciler_sends_a_lost_message_again_with_state_on_the_cluster(
    cluster: LocalCluster, redis_client: redis.Redis
) -> None:
    fleet = cluster.fleet()
    queue = fleet.settings.queues.agents
    # Every slot busy (and every prefetch window full): the next messages wait in the queue.
    busy = fleet.map("fleet_test_tasks.sleepy", [{"n": n, "sleep_s": 3.0} for n in range(8)])
    deadline = time.monotonic() + 30
    while redis_client.llen(queue) and time.monotonic() < deadline:
        time.sleep(0.05)
    run = fleet.map("fleet_test_tasks.echo", [{"n": n} for n in range(3)])
    lost = json.loads(redis_client.rpop(queue))["headers"]["id"]
    assert busy.wait(timeout_s=60).succeeded == 8
    summary = run.wait(timeout_s=120)
    assert summary.succeeded == 3 and summary.recovered == 1, (lost, summary)


def test_runs_spread_over_every_master(cluster: LocalCluster, redis_cluster: RedisClusterGroup) -> None:
    fleet = cluster.fleet()
    for _ in range(6):
        fleet.map("fleet_test_tasks.echo", [{"n": 0}]).wait(timeout_s=60)
    deadline = time.monotonic() + 10
    sizes: list[int] = []
    while time.monotonic() < deadline:
        sizes = []
        for node in redis_cluster.nodes:
            client = redis.Redis(port=node.port, password=PASSWORD)
            try:
                sizes.append(int(client.dbsize()))
            finally:
                client.close()
        if all(sizes):
            break
        time.sleep(0.2)
    assert all(sizes), sizes


def _durable_run(store: RunStore) -> tuple[str, str]:
    run_id = uuid.uuid4().hex[:16]
    key = default_item_key(run_id, 0, {"x": 1})
    store.create_run(
        run_id, name="d", kind="graph", task="t.a", items=[(f"{run_id}-0", key, "0")], inputs=[{"x": 1}]
    )
    return run_id, key


def test_spending_is_charged_once_with_its_alerts_on_the_cluster(own: Settings, state: Any) -> None:
    store = RunStore.from_settings(own, state)
    run_id, key = _durable_run(store)
    spend = SpendLedger(state, prefix=own.key_prefix)
    ledger = BudgetLedger(state, prefix=own.key_prefix)
    caps = Caps(run_usd=1.0, tenant_usd=10.0, alert_at=0.5)
    raised = []
    for seq in (1, 1, 2):  # the first report sent twice
        report = Report(key, run_id, "acme", Spend(usd=0.5, tokens=10, turns=1), "tok", seq, "anthropic:m")
        totals, alerts = ledger.charge(report, caps)
        raised += alerts
    assert totals.usd == pytest.approx(1.0) and totals.turns == 2
    assert [(a.scope, a.level) for a in raised] == [("run", "soft"), ("run", "hard")]
    assert spend.by_run(run_id) == {"anthropic:m": pytest.approx(1.0)}
    assert ledger.tenants_today() == {"acme": pytest.approx(1.0)}


def test_memory_graphs_and_compensations_work_on_the_cluster(own: Settings, state: Any) -> None:
    store = RunStore.from_settings(own, state)
    run_id, key = _durable_run(store)
    memory = MemoryStore(state, prefix=own.key_prefix)
    assert memory.write(key, "s:fetch#1", {"page": 1}, once=True) == {"page": 1}
    spec = GraphSpec((StepSpec("a", "t.a", "q"), StepSpec("b", "t.b", "q", ("a",))))
    advanced = GraphState(store).advance(
        run_id, key, spec, "a", ok=True, cost_usd=0.0, duration_s=0.0, attempts=1, index=0
    )
    assert advanced.released == ["b"]
    undo = UndoLog(store)
    undo.note(run_id, key, {"task": "t.a", "inputs": {}, "result": 1})
    assert undo.request(run_id) and run_id in store.active_runs()
    assert undo.settle(run_id, key, done=True)
    undo.finish(run_id)
    assert run_id not in store.active_runs()


@pytest.mark.parametrize("kind", KINDS)
def test_a_stale_copy_on_the_broker_is_dropped_there_with_state_on_the_cluster(
    kind: str, redis_cluster: RedisClusterGroup, redis_url: str, redis_client: redis.Redis
) -> None:
    tag = uuid.uuid4().hex[:8]
    settings = load_settings(
        broker_url=redis_url,
        state_url=redis_cluster.url,
        key_prefix=f"cs{tag}",
        queues=own_queues(f"cs{tag}"),
        delivery={"reconcile_grace_s": 5.0},
        dispatch={"require_workers": False},
    )
    with Fleet(settings) as fleet:
        assert isinstance(fleet.store.client, redis.RedisCluster)
        stranded = lose(kind, fleet, redis_client)
        try:
            assert stranded.recovered(two_passes(fleet))
            assert waiting_ids(redis_client, stranded.queue) == [stranded.task_id], "sent again"
            assert not redis_client.hexists(UNACKED, stranded.tag), "the stale copy is gone"
            assert redis_client.zscore(UNACKED_INDEX, stranded.tag) is None
        finally:
            forget(redis_client, stranded.tag)


@pytest.fixture
def private_broker() -> Iterator[EmbeddedRedis]:
    """A broker for one test alone: what is left unacknowledged on it is that test's."""
    with EmbeddedRedis() as server:
        yield server


def test_a_graph_step_whose_worker_was_sigkilled_comes_back_with_state_on_the_cluster(
    redis_cluster: RedisClusterGroup, private_broker: EmbeddedRedis, tmp_path: Any
) -> None:
    effects = Effects(tmp_path / "effects")
    broker = redis.Redis.from_url(private_broker.url, decode_responses=True)
    with fault_cluster(private_broker.url, effects, workers=1, state_url=redis_cluster.url) as cluster:
        run = cluster.fleet().graph([Node("a", tt.effect)], [{"token": "g-0", "sleep_s": 3.0}])
        wait_until(lambda: effects.executions()["g-0"] == 1, 60, "the step to start")
        cluster.kill_worker(cluster.workers[0])
        # The dead worker's copy waits on the broker for the visibility timeout (an hour).
        (held,) = broker.hvals(UNACKED)
        assert json.loads(held)[0]["headers"]["id"] == f"{run.id}-0-n-a"
        cluster.add_worker()
        summary = run.wait(timeout_s=120)
        assert (summary.succeeded, summary.recovered) == (1, 1)
        wait_until(lambda: broker.hlen(UNACKED) == 0, 30, "no unacknowledged copy left on the broker")
    assert broker.zcard(UNACKED_INDEX) == 0
    assert effects.executions()["g-0"] == 2 and effects.applied() == {"g-0": 1}
