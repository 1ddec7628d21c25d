"""The durable stores' scripts against a real Redis: fenced memory writes, spending counted
once per report with each alert raised once, graph progress, and the undo log's order."""

from __future__ import annotations

import pytest
import redis

from agentfleet.errors import Deferred
from agentfleet.runs import (
    BudgetLedger,
    Caps,
    GraphSpec,
    GraphState,
    MemoryStore,
    Refused,
    Report,
    RunStore,
    Spend,
    Standing,
    StepSpec,
    UndoLog,
)
from agentfleet.spend import SpendLedger
from agentfleet.tasks.memory import StoredMemory

DIAMOND = GraphSpec(
    (
        StepSpec("a", "t.a", "q"),
        StepSpec("b", "t.b", "q", ("a",)),
        StepSpec("c", "t.c", "q", ("a",)),
        StepSpec("d", "t.d", "q", ("b", "c")),
    )
)


@pytest.fixture
def runs(redis_client: redis.Redis, key_prefix: str) -> RunStore:
    store = RunStore(redis_client, prefix=key_prefix, ttl_s=3600)
    store.create_run("r", name="t", kind="graph", task="t.a", items=[("r-0", "k0", "0")], inputs=[{"x": 1}])
    return store


def _report(seq: int, usd: float, *, token: str = "tok", tenant: str | None = "acme") -> Report:
    return Report(
        "k0", "r", tenant, Spend(usd=usd, tokens=10, turns=1, seconds=0.5), token, seq, "anthropic:m"
    )


def _ledgers(runs: RunStore) -> tuple[BudgetLedger, SpendLedger]:
    spend = SpendLedger(runs.client, prefix=runs.prefix)
    return BudgetLedger(runs.client, prefix=runs.prefix), spend


def test_a_memory_write_is_refused_while_another_delivery_holds_the_claim(runs: RunStore) -> None:
    memory = MemoryStore(runs.client, prefix=runs.prefix, ttl_s=60)
    runs.client.set(runs.claim_key("k0"), "other")
    with pytest.raises(Refused):
        memory.write("k0", "s:x#0", 1, token="mine")
    with pytest.raises(Deferred, match="another delivery holds this item's claim"):
        StoredMemory(memory, "k0", token="mine").write("s:x#0", 1)
    runs.client.delete(runs.claim_key("k0"))
    assert memory.write("k0", "s:x#0", 1, token="mine") == 1, "with the claim lapsed, the write goes through"
    assert memory.write("k0", "s:x#0", 2, once=True, token="mine") == 1, "the first stored value stays"
    assert 0 < runs.client.ttl(memory.key("k0")) <= 60


def test_a_spending_report_sent_twice_counts_once(runs: RunStore) -> None:
    ledger, spend = _ledgers(runs)
    caps = Caps()
    ledger.charge(_report(1, 0.01), caps)
    ledger.charge(_report(1, 0.01), caps)  # the same report again, after a dropped connection
    totals, _ = ledger.charge(_report(2, 0.02), caps)
    assert totals == Spend(usd=pytest.approx(0.03), tokens=20, turns=2, seconds=1.0)
    assert ledger.item("k0") == totals
    assert ledger.standing("r", "acme") == Standing(
        pytest.approx(0.03), None, pytest.approx(0.03), pytest.approx(0.03)
    )
    assert spend.by_run("r") == {"anthropic:m": 0.03}, "the spend ledger counts it by downstream"
    assert spend.days(1)[0].total_usd == 0.03


def test_each_budget_alerts_once_at_its_share_and_once_at_its_cap(runs: RunStore) -> None:
    ledger, _ = _ledgers(runs)
    caps = Caps(run_usd=1.0, tenant_usd=2.0, fleet_usd=10.0, alert_at=0.5)
    raised = []
    for seq in range(1, 7):
        raised += ledger.charge(_report(seq, 0.25, token=f"t{seq % 2}"), caps)[1]
    assert [(a.scope, a.level) for a in raised] == [("run", "soft"), ("run", "hard"), ("tenant", "soft")]
    assert raised[0].name == "r" and raised[2].name == "acme"
    assert raised[1].spent_usd == pytest.approx(1.0) and raised[1].cap_usd == 1.0
    stats = runs.completion_stats(1).totals
    assert stats["budget_alerts:run:hard"] == 1 and "budget_alerts:fleet:soft" not in stats


def test_a_runs_own_budget_is_the_one_it_alerts_against(runs: RunStore) -> None:
    ledger, spend = _ledgers(runs)
    spend.set_budget("r", 0.1)
    _, raised = ledger.charge(_report(1, 0.25), Caps(run_usd=10.0))
    assert [(a.scope, a.level, a.cap_usd) for a in raised] == [("run", "soft", 0.1), ("run", "hard", 0.1)]
    assert ledger.standing("r", None).run_budget_usd == 0.1


def test_a_failed_step_skips_what_depends_on_it_and_the_other_branch_finishes(runs: RunStore) -> None:
    graph = GraphState(runs)
    a = graph.advance("r", "k0", DIAMOND, "a", ok=True, cost_usd=0.1, duration_s=1.0, attempts=1, index=0)
    assert (a.released, a.complete) == (["b", "c"], False)
    b = graph.advance("r", "k0", DIAMOND, "b", ok=False, cost_usd=0.0, duration_s=1.0, attempts=2, index=0)
    assert (b.released, b.skipped, b.complete) == ([], ["d"], False)
    again = graph.advance(
        "r", "k0", DIAMOND, "b", ok=False, cost_usd=0.0, duration_s=1.0, attempts=2, index=0
    )
    assert not again.counted, "a step's end is recorded once"
    c = graph.advance("r", "k0", DIAMOND, "c", ok=True, cost_usd=0.1, duration_s=1.0, attempts=1, index=0)
    assert (c.released, c.complete) == ([], True)
    assert graph.item_input("k0") == {"x": 1}
    record = runs.get_run("r")
    assert (record["step:b:failed"], record["step:d:skipped"], record["step:c:succeeded"]) == ("1", "1", "1")


def test_reopening_a_failed_step_releases_what_it_had_skipped(runs: RunStore) -> None:
    graph = GraphState(runs)
    for step, ok in (("a", True), ("b", False), ("c", True)):
        graph.advance("r", "k0", DIAMOND, step, ok=ok, cost_usd=0.0, duration_s=0.0, attempts=1, index=0)
    assert graph.reopen("r", "k0", DIAMOND, "b", "k0#n:b")
    assert not graph.reopen("r", "k0", DIAMOND, "b", "k0#n:b"), "only a failed step reopens"
    state = graph.states(["k0"])[0]
    assert "b" not in state and "d" not in state and state["c"] == "succeeded"
    b = graph.advance("r", "k0", DIAMOND, "b", ok=True, cost_usd=0.0, duration_s=0.0, attempts=1, index=0)
    assert (b.released, b.complete) == (["d"], False)
    record = runs.get_run("r")
    assert (record["step:b:failed"], record["step:d:skipped"]) == ("0", "0")


def test_the_undo_log_lists_successes_newest_first_and_settles_each_once(runs: RunStore) -> None:
    undo = UndoLog(runs)
    for key in ("k1", "k2", "k3"):
        undo.note("r", key, {"task": "t", "inputs": {}, "result": key})
    undo.note("r", "k1", {"task": "t", "inputs": {}, "result": "later"})  # a redelivered success
    entries = undo.newest_first("r")
    assert [e.key for e in entries] == ["k3", "k2", "k1"]
    assert entries[2].data["result"] == "k1", "the first note of an entry stays"
    assert undo.settle("r", "k3", done=True) and not undo.settle("r", "k3", done=True)
    assert undo.settle("r", "k2", done=False)
    assert undo.settled("r") == {"k3": "done", "k2": "dead"}
    assert undo.reopen("r", "k2") and not undo.reopen("r", "k3")
    record = runs.get_run("r")
    assert (record["compensated"], record["compensations_failed"], record["compensation"]) == (
        "1",
        "0",
        "requested",
    )
