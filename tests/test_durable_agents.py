"""Work done once stays done, on real workers: steps, and agents that resume after a retry, a
deferral, a requeue from the dead-letter queue and a SIGKILL of their worker.

The oracle is what the far ends saw: the mock Messages API's answered requests (a conversation
answered twice is a repeated model call) and the scripted server's effects, each carrying the
``Idempotency-Key`` of the tool call that applied it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import durable_test_tasks as dt
import pytest
import redis
from durable_support import FAR_HOST, answered, durable_cluster, effects, requests_for
from fault_support import wait_until
from http_scripted import Reply, ScriptedServer

from agentfleet import LocalCluster
from agentfleet.keys import RunKeys
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.orchestration import Fleet, Run

pytestmark = pytest.mark.slow

CHAIN = "CHAIN tool_a, tool_b, tool_c"


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


@pytest.fixture(scope="module")
def far() -> Iterator[ScriptedServer]:
    with ScriptedServer(host=FAR_HOST) as server:
        server.script("/draw", Reply(200, {"ok": True}))
        yield server


@pytest.fixture(scope="module")
def dcluster(redis_url: str, mock: MockMessagesServer, far: ScriptedServer) -> Iterator[LocalCluster]:
    with durable_cluster(redis_url, mock, far) as running:
        yield running


@pytest.fixture
def fleet(dcluster: LocalCluster, mock: MockMessagesServer, far: ScriptedServer) -> Fleet:
    mock.reset()
    far.script("/effect", Reply(200, {"applied": True}))
    return dcluster.fleet()


def _one(run: Run, timeout_s: float = 90.0) -> object:
    summary = run.wait(timeout_s=timeout_s)
    assert summary.timed_out == 0, summary
    (outcome,) = run.outcomes()
    return outcome


def _fail_next_model_call_after(far: ScriptedServer, mock: MockMessagesServer, run: Run, status: int) -> None:
    """Once the run's second tool effect has arrived (its reply held 0.5 s), script the mock to
    answer the next model call with ``status``."""
    wait_until(lambda: len(effects(far, "/effect", run)) >= 2, 30, "the second tool effect")
    mock.script([{"status": status}])


def test_a_step_runs_once_across_a_retry(fleet: Fleet, far: ScriptedServer) -> None:
    run = fleet.map(dt.draw_then_fail, [{"token": "s1"}])
    outcome = _one(run)
    assert outcome.ok and outcome.attempts == 2, outcome
    assert outcome.result["attempt"] == 1
    assert outcome.result["drawn"] == {"status": 200}, "the retry got the stored step result"
    assert list(effects(far, "/draw", run).values()) == [1], "the step's effect happened once"


def test_an_items_memory_expires_with_its_outcome(fleet: Fleet, redis_client: redis.Redis) -> None:
    run = fleet.map(dt.draw_then_fail, [{"token": "s2"}])
    outcome = _one(run)
    keys = RunKeys(fleet.settings.key_prefix)
    ttl = redis_client.ttl(keys.item("mem", outcome.idempotency_key))
    outcome_ttl = redis_client.ttl(keys.item("out", outcome.idempotency_key))
    assert fleet.settings.result_ttl_s - 60 < ttl <= fleet.settings.result_ttl_s
    assert abs(ttl - outcome_ttl) <= 5


def test_a_retried_agent_resumes_without_repeating_a_model_call_or_a_tool(
    fleet: Fleet, mock: MockMessagesServer, far: ScriptedServer
) -> None:
    far.script("/effect", Reply(200, {"applied": True}, delay_s=0.5))
    marker = "retry-resume"
    run = fleet.map(dt.chain_agent, [{"prompt": f"{marker}\n{CHAIN}"}])
    _fail_next_model_call_after(far, mock, run, 500)
    outcome = _one(run)
    assert outcome.ok and outcome.attempts == 2, outcome
    assert outcome.result["turns"] == 4
    assert [r.status for r in requests_for(mock, marker)] == [200, 200, 500, 200, 200]
    assert set(answered(mock, marker).values()) == {1}, "no conversation was answered twice"
    applied = effects(far, "/effect", run)
    assert len(applied) == 3 and set(applied.values()) == {1}, "each tool ran once"


def test_a_rate_limited_tool_frees_its_slot_and_the_agent_resumes(
    fleet: Fleet, mock: MockMessagesServer, far: ScriptedServer
) -> None:
    far.script("/limited", Reply(429, {"error": "slow down"}, headers={"retry-after": "1"}), Reply(200, {}))
    marker = "deferral-resume"
    run = fleet.map(dt.chain_agent, [{"prompt": f"{marker}\nCHAIN limited, tool_a"}])
    outcome = _one(run)
    summary = run.summary()
    assert outcome.ok and outcome.attempts == 1, outcome
    assert (summary.deferrals, summary.retries) == (1, 0), "rescheduled for the wait, not retried"
    assert [c["name"] for c in outcome.result["tool_calls"]] == ["limited", "tool_a"]
    assert [c["is_error"] for c in outcome.result["tool_calls"]] == [False, False]
    assert sum(answered(mock, marker).values()) == 3, "three model calls in all, none repeated"
    limited = [h for h in far.hits("/limited") if h.at >= summary.created_at]
    assert len(limited) == 2 and limited[1].at - limited[0].at >= 1.0, "it came back after the wait"


def test_a_requeued_dead_letter_resumes_where_it_failed(
    fleet: Fleet, mock: MockMessagesServer, far: ScriptedServer
) -> None:
    far.script("/effect", Reply(200, {"applied": True}, delay_s=0.5))
    marker = "requeue-resume"
    run = fleet.map(dt.fragile_agent, [{"prompt": f"{marker}\n{CHAIN}"}])
    _fail_next_model_call_after(far, mock, run, 400)
    failed = _one(run)
    assert (failed.ok, failed.error_type, failed.dead_lettered) == (False, "BadRequest", True)
    (result,) = fleet.dlq.requeue(run_id=run.id)
    assert result.action == "requeued"
    wait_until(lambda: run.summary().succeeded == 1, 60, "the requeued item to succeed")
    (outcome,) = run.outcomes()
    assert outcome.result["turns"] == 4
    assert [r.status for r in requests_for(mock, marker)] == [200, 200, 400, 200, 200]
    assert set(answered(mock, marker).values()) == {1}
    applied = effects(far, "/effect", run)
    assert len(applied) == 3 and set(applied.values()) == {1}
    assert run.summary().redelivered == 1


def test_a_worker_killed_mid_agent_costs_at_most_one_repeated_model_call_and_no_repeated_effect(
    fleet: Fleet, dcluster: LocalCluster, mock: MockMessagesServer, far: ScriptedServer
) -> None:
    far.script("/effect", Reply(200, {"applied": True}, delay_s=1.0))
    marker = "sigkill-resume"
    run = fleet.map(dt.chain_agent, [{"prompt": f"{marker}\nCHAIN tool_a, tool_b, tool_c, tool_d"}])
    wait_until(lambda: len(effects(far, "/effect", run)) >= 2, 30, "the agent to be half-way")
    time.sleep(0.3)  # the second tool is under way at the far end
    dcluster.kill_worker(dcluster.workers[0])
    dcluster.add_worker()
    outcome = _one(run, timeout_s=120)
    assert outcome.ok, outcome
    assert run.summary().recovered == 1, "the killed worker's item was sent again"
    assert outcome.result["turns"] == 5
    repeated = sum(n - 1 for n in answered(mock, marker).values())
    assert repeated <= 1, f"{repeated} model calls were answered twice"
    assert len(answered(mock, marker)) == 5
    keys = effects(far, "/effect", run)
    assert len(keys) == 4, "four tool calls, each under its own key: the far end applied each once"
