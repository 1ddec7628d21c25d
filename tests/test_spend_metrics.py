"""The spend ledger and the metrics read from it, and the queue head wait (fakeredis with Lua)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest

from agentfleet.config import Settings, load_settings
from agentfleet.runs import RunStore
from agentfleet.service.queue_age import collect_queue_age
from agentfleet.service.spend_collectors import collect_budget_share, collect_spend
from agentfleet.spend import SpendLedger, utc_day
from agentfleet.transport.layout import delivery_tag as head_tag
from agentfleet.transport.layout import queue_keys

DAY_S = 86400.0
NOON = 1_767_268_800.0  # 2026-01-01T12:00:00Z


@dataclass
class _Sources:
    settings: Settings
    store: RunStore
    broker: Any

    def ping_workers(self, timeout_s: float) -> list[str]:
        return []


@pytest.fixture
def sources() -> _Sources:
    settings = load_settings(key_prefix="t", budgets={"run_usd": 2.0})
    client = fakeredis.FakeRedis(decode_responses=True)
    return _Sources(settings, RunStore(client, prefix="t"), client)


def _ledger(sources: _Sources) -> SpendLedger:
    return SpendLedger.from_settings(sources.settings, sources.store.client)


def test_the_ledger_adds_up_spend_by_run_and_downstream() -> None:
    ledger = SpendLedger(fakeredis.FakeRedis(decode_responses=True), prefix="t")
    ledger.record("r1", "anthropic:claude-haiku-4-5", 0.25, at=NOON)
    ledger.record("r1", "anthropic:claude-haiku-4-5", 0.5, at=NOON)
    ledger.record("r1", "anthropic:claude-sonnet-4-5", 1.0, at=NOON)
    ledger.record("r2", "anthropic:claude-haiku-4-5", 0.125, at=NOON)
    assert ledger.by_run("r1") == {"anthropic:claude-sonnet-4-5": 1.0, "anthropic:claude-haiku-4-5": 0.75}
    assert ledger.runs(["r2", "nope"]) == {"r2": {"anthropic:claude-haiku-4-5": 0.125}, "nope": {}}


def test_the_ledger_keeps_one_total_per_utc_day_newest_first() -> None:
    ledger = SpendLedger(fakeredis.FakeRedis(decode_responses=True), prefix="t")
    ledger.record("r1", "anthropic:claude-haiku-4-5", 0.5, at=NOON - DAY_S)
    ledger.record("r2", "anthropic:claude-haiku-4-5", 0.25, at=NOON)
    ledger.record("r2", "vendor-a.example", 0.25, at=NOON + 3600)
    days = ledger.days(3, now=NOON + 3600)
    assert [d.day for d in days] == ["2026-01-01", "2025-12-31", "2025-12-30"]
    assert [d.total_usd for d in days] == [0.5, 0.5, 0.0]
    assert SpendLedger.by_downstream(days) == {"anthropic:claude-haiku-4-5": 0.75, "vendor-a.example": 0.25}


def test_a_day_of_spend_expires_after_the_days_kept() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    ledger = SpendLedger(client, prefix="t", keep_days=3)
    ledger.record("r1", "anthropic:claude-haiku-4-5", 0.5, at=NOON)
    assert 3 * DAY_S < client.ttl(ledger.day_key(utc_day(NOON))) <= 4 * DAY_S


def test_nothing_is_recorded_for_a_free_call() -> None:
    client = fakeredis.FakeRedis(decode_responses=True)
    SpendLedger(client, prefix="t").record("r1", "anthropic:claude-haiku-4-5", 0.0)
    assert client.keys("*") == []


def test_todays_spend_is_a_sample_per_downstream(sources: _Sources) -> None:
    assert [(s.labels, s.value) for s in collect_spend(sources)] == [({"downstream": "none"}, 0.0)]
    _ledger(sources).record("r1", "anthropic:claude-haiku-4-5", 0.4)
    _ledger(sources).record("r1", "anthropic:claude-haiku-4-5", 0.4, at=time.time() - 2 * DAY_S)
    assert [(s.labels, s.value) for s in collect_spend(sources)] == [
        ({"downstream": "anthropic:claude-haiku-4-5"}, 0.4)
    ]


def test_budget_share_covers_running_runs_only(sources: _Sources) -> None:
    items = [("t-0", "k0", "0")]
    sources.store.create_run("live", name="pricing", kind="map", task="x", items=items)
    sources.store.create_run("done", name="old", kind="map", task="x", items=[])
    _ledger(sources).record("live", "anthropic:claude-haiku-4-5", 1.5)
    shares = [(s.labels, s.value) for s in collect_budget_share(sources)]
    assert shares == [({"run": "live", "name": "pricing"}, 0.75)]


def test_budget_share_is_absent_without_a_run_budget(sources: _Sources) -> None:
    sources.settings = load_settings(key_prefix="t")
    sources.store.create_run("live", name="pricing", kind="map", task="x", items=[("t-0", "k0", "0")])
    assert collect_budget_share(sources) == []


def _message(tag: str) -> str:
    return json.dumps({"body": "", "headers": {}, "properties": {"delivery_tag": tag}})


def _waits(sources: _Sources) -> dict[str, float]:
    return {s.labels["role"]: s.value for s in collect_queue_age(sources)}


def test_the_head_wait_grows_while_the_same_message_stays_next(sources: _Sources) -> None:
    client = sources.store.client
    agents = sources.settings.queues.agents
    assert _waits(sources) == {"agents": 0.0, "fanin": 0.0, "maintenance": 0.0}
    client.lpush(agents, _message("first"))
    assert _waits(sources)["agents"] == 0.0
    client.hset(f"t:queuehead:{agents}", "at", repr(time.time() - 90))
    client.lpush(agents, _message("second"))
    assert 89 <= _waits(sources)["agents"] < 120, "a newer message behind it does not reset the wait"
    client.rpop(agents)
    assert _waits(sources)["agents"] < 5, "the next message is another one: its wait starts now"
    client.rpop(agents)
    assert _waits(sources)["agents"] == 0.0
    assert not client.exists(f"t:queuehead:{agents}")


def test_the_head_wait_of_a_queue_is_its_longest_priority_list(sources: _Sources) -> None:
    client = sources.store.client
    agents = sources.settings.queues.agents
    high = queue_keys(agents)[2]
    client.lpush(agents, _message("plain"))
    client.lpush(high, _message("urgent"))
    collect_queue_age(sources)
    client.hset(f"t:queuehead:{high}", "at", repr(time.time() - 30))
    assert 29 <= _waits(sources)["agents"] < 60


def test_head_tag_reads_kombus_delivery_tag_and_tolerates_junk() -> None:
    assert head_tag(_message("abc")) == "abc"
    assert head_tag(None) == ""
    assert head_tag("not json") == ""
    assert head_tag(json.dumps([1, 2])) == ""


def test_a_runs_own_budget_stands_beside_what_it_spent() -> None:
    ledger = SpendLedger(fakeredis.FakeRedis(decode_responses=True), prefix="t")
    assert ledger.standing("r1") == (0.0, None)
    ledger.set_budget("r1", 0.5)
    ledger.record("r1", "anthropic:claude-haiku-4-5", 0.25)
    ledger.record("r1", "anthropic:claude-sonnet-4-5", 0.125)
    assert ledger.standing("r1") == (0.375, 0.5)


def test_a_runs_own_budget_sets_its_share(sources: _Sources) -> None:
    sources.settings = load_settings(key_prefix="t")
    sources.store.create_run("own", name="capped", kind="map", task="x", items=[("t-0", "k0", "0")])
    _ledger(sources).set_budget("own", 4.0)
    _ledger(sources).record("own", "anthropic:claude-haiku-4-5", 1.0)
    assert [(s.labels, s.value) for s in collect_budget_share(sources)] == [
        ({"run": "own", "name": "capped"}, 0.25)
    ]
