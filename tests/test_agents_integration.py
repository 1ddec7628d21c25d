"""Real agents on real workers: the Anthropic SDK and ``ctx.http`` inside Celery worker processes,
against the mock Messages API and local HTTP servers in this process.

One cluster (one worker process, threads pool) serves the whole module; each test resets the
mock server so its request log and script are the test's own.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import agent_test_tasks as at
import pytest
import redis
from http_scripted import Reply, ScriptedServer

from agentfleet import LocalCluster
from agentfleet.config import Settings, load_settings
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.orchestration import Fleet, Run
from agentfleet.tools.audit import AuditLog

pytestmark = pytest.mark.slow

CANARY = f"canary-{uuid.uuid4().hex}"
SECRET_TASKS = 20


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


@pytest.fixture(scope="module")
def vendor() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"ta{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def settings(prefix: str) -> Settings:
    return load_settings(key_prefix=prefix)


@pytest.fixture(scope="module")
def acluster(
    redis_url: str, prefix: str, settings: Settings, mock: MockMessagesServer
) -> Iterator[LocalCluster]:
    env = dict(
        # Not conftest's cluster_env: a sibling conftest may own that module name in a run.
        PYTHONPATH=os.path.dirname(os.path.abspath(__file__)),
        AGENTFLEET_TASK_MODULES="agent_test_tasks",
        AGENTFLEET_KEY_PREFIX=prefix,
        AGENTFLEET_LLM__BASE_URL=mock.url,
        AGENTFLEET_RETRY__BACKOFF_BASE_S="0.1",
        AGENTFLEET_RETRY__BACKOFF_CAP_S="0.5",
        AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS=json.dumps(["127.0.0.1"]),
        AGENTFLEET_CREDENTIALS=json.dumps({"vendor": {"env": "VENDOR_CANARY", "domains": ["127.0.0.1"]}}),
        VENDOR_CANARY=CANARY,
    )
    # DEBUG: every library's log lines are captured, so the canary hunt covers them too.
    with LocalCluster(
        workers=1,
        concurrency=8,
        pool="threads",
        broker_url=redis_url,
        env=env,
        settings=settings,
        loglevel="DEBUG",
    ) as running:
        yield running


@pytest.fixture
def fleet(acluster: LocalCluster, mock: MockMessagesServer) -> Fleet:
    mock.reset()
    return acluster.fleet()


def _one(run: Run, timeout_s: float = 60.0) -> Any:
    summary = run.wait(timeout_s=timeout_s)
    assert summary.tasks_total == 1 and summary.timed_out == 0, summary
    (outcome,) = run.outcomes()
    return outcome


def _messages(mock: MockMessagesServer) -> list[Any]:
    return [r for r in mock.requests if r.path == "/v1/messages"]


# The SDK against the mock, through the fleet ---------------------------------------------------


def test_a_text_reply(fleet: Fleet, mock: MockMessagesServer) -> None:
    outcome = _one(fleet.map(at.ask, [{"prompt": "SAY hello from the fleet"}]))
    assert outcome.ok, outcome
    assert outcome.result["text"] == "hello from the fleet"
    assert outcome.result["stop_reason"] == "end_turn"
    (request,) = _messages(mock)
    assert (request.status, request.model, request.sdk_retry_count) == (200, at.MODEL, 0)


def test_a_tool_use_round_trip(fleet: Fleet, mock: MockMessagesServer) -> None:
    outcome = _one(fleet.map(at.lookup_agent, [{"prompt": 'CALL lookup {"q": "answer"}'}]))
    assert outcome.ok, outcome
    result = outcome.result
    assert result["turns"] == 2 and result["stop_reason"] == "end_turn"
    assert [(c["name"], c["input"], c["is_error"]) for c in result["tool_calls"]] == [
        ("lookup", {"q": "answer"}, False)
    ]
    assert "42" in result["text"], "the model's summary quotes the tool's result"
    assert [r.status for r in _messages(mock)] == [200, 200]


def test_429_is_retried_by_the_fleet_after_retry_after(fleet: Fleet, mock: MockMessagesServer) -> None:
    mock.script([{"status": 429, "retry_after_s": 1}])
    outcome = _one(fleet.map(at.ask, [{"prompt": "SAY after the wait"}]))
    assert outcome.ok and outcome.result["text"] == "after the wait", outcome
    assert outcome.attempts == 2
    first, second = _messages(mock)
    assert (first.status, second.status) == (429, 200)
    assert second.arrived_at - first.arrived_at >= 1.0, "the retry waited for retry-after"
    # max_retries=0 in the SDK: one request per fleet attempt, never a retry of its own.
    assert [first.sdk_retry_count, second.sdk_retry_count] == [0, 0]


def test_529_is_retried(fleet: Fleet, mock: MockMessagesServer) -> None:
    mock.script([529])
    run = fleet.map(at.ask, [{"prompt": "SAY survived"}])
    outcome = _one(run)
    assert outcome.ok and outcome.attempts == 2, outcome
    assert [(r.status, r.sdk_retry_count) for r in _messages(mock)] == [(529, 0), (200, 0)]
    assert run.summary().retries == 1


def test_401_is_dead_lettered_at_once(fleet: Fleet, mock: MockMessagesServer) -> None:
    mock.script([401, 401])
    run = fleet.map(at.ask, [{"prompt": "SAY never"}])
    outcome = _one(run)
    assert not outcome.ok and outcome.dead_lettered, outcome
    assert (outcome.error_type, outcome.attempts) == ("AuthError", 1)
    assert len(_messages(mock)) == 1
    (entry,) = fleet.dlq.list(run_id=run.id)
    assert (entry.error_type, entry.status_code, entry.attempts) == ("AuthError", 401, 1)
    assert entry.downstream == f"anthropic:{at.MODEL}"


def test_a_spend_limit_429_is_permanent(fleet: Fleet, mock: MockMessagesServer) -> None:
    mock.script([{"status": 429, "error_code": "enforced_spend_limit_reached", "retry_after_s": 1}])
    run = fleet.map(at.ask, [{"prompt": "SAY never"}])
    outcome = _one(run)
    assert (outcome.ok, outcome.error_type, outcome.attempts) == (False, "SpendLimitReached", 1), outcome
    assert len(_messages(mock)) == 1


@pytest.mark.parametrize(
    ("status", "error_type", "attempts"), [(529, "Overloaded", 2), (400, "BadRequest", 1)]
)
def test_an_error_inside_a_stream_is_classified_by_its_type(
    fleet: Fleet, mock: MockMessagesServer, status: int, error_type: str, attempts: int
) -> None:
    mock.script([{"status": status, "in_stream": True}])
    run = fleet.map(at.ask_streamed, [{"prompt": "SAY streamed"}])
    outcome = _one(run)
    assert outcome.attempts == attempts, outcome
    errors = [e["error_type"] for e in fleet.store.attempt_errors(outcome.idempotency_key)]
    assert errors == [error_type], errors
    if attempts == 1:
        assert outcome.error_type == error_type
    else:
        assert outcome.ok and outcome.result["text"] == "streamed"


def test_a_streamed_reply_is_priced_from_its_events(
    fleet: Fleet, mock: MockMessagesServer, settings: Settings
) -> None:
    outcome = _one(fleet.map(at.ask_streamed, [{"prompt": "x" * 2000 + "\nLONG 100", "max_tokens": 200}]))
    assert outcome.ok, outcome
    usage = outcome.result["usage"]
    price = settings.llm.prices[at.MODEL]
    expected = usage["input_tokens"] * price.input_per_mtok + usage["output_tokens"] * price.output_per_mtok
    assert usage["input_tokens"] >= 500 and usage["output_tokens"] >= 50
    assert outcome.cost_usd == pytest.approx(expected / 1_000_000, rel=1e-9)


def _priced(usage: dict[str, Any], settings: Settings) -> float:
    price = settings.llm.prices[at.MODEL]
    return (
        usage["input_tokens"] * price.input_per_mtok
        + usage["output_tokens"] * price.output_per_mtok
        + (usage.get("cache_creation_input_tokens") or 0) * price.cache_write_per_mtok
        + (usage.get("cache_read_input_tokens") or 0) * price.cache_read_per_mtok
    ) / 1_000_000


def test_cost_is_the_usage_times_the_price_table(
    fleet: Fleet, mock: MockMessagesServer, settings: Settings
) -> None:
    system = "You are a careful assistant. " * 200
    writes = fleet.map(
        at.ask, [{"prompt": "x" * 4000 + "\nLONG 300", "max_tokens": 400, "cached_system": system}]
    )
    first = _one(writes)
    reads = fleet.map(at.ask, [{"prompt": "SAY cheap", "cached_system": system}, {"prompt": "SAY plain"}])
    assert reads.wait(timeout_s=60).succeeded == 2
    outcomes = [first, *reads.outcomes()]
    assert all(o.ok for o in outcomes), outcomes
    usages = [o.result["usage"] for o in outcomes]
    assert usages[0]["cache_creation_input_tokens"] > 0 and usages[0]["output_tokens"] > 250
    assert usages[1]["cache_read_input_tokens"] > 0, "the second call read the cached prefix"
    for outcome, usage in zip(outcomes, usages, strict=True):
        assert outcome.cost_usd == pytest.approx(_priced(usage, settings), rel=1e-9)
    # A run summary states its cost to the micro-dollar.
    assert writes.summary().cost_usd == pytest.approx(outcomes[0].cost_usd, abs=5e-7)
    assert reads.summary().cost_usd == pytest.approx(outcomes[1].cost_usd + outcomes[2].cost_usd, abs=5e-7)
    served = sum(r.input_tokens + r.output_tokens for r in _messages(mock))
    assert served == sum(u["input_tokens"] + u["output_tokens"] for u in usages)


# The agent loop on a worker ----------------------------------------------------------------------


def test_three_one_second_tools_in_one_response_run_together(fleet: Fleet, mock: MockMessagesServer) -> None:
    outcome = _one(fleet.map(at.slow_tools_agent, [{"prompt": "USE TOOLS slow_a, slow_b, slow_c"}]))
    assert outcome.ok, outcome
    result = outcome.result
    assert sorted(c["name"] for c in result["tool_calls"]) == ["slow_a", "slow_b", "slow_c"]
    spans = list(result["spans"].values())
    assert len(spans) == 3 and all(end - start >= at.SLOW_TOOL_S for start, end in spans)
    assert max(end for _, end in spans) - min(start for start, _ in spans) < 2.0
    assert max(start for start, _ in spans) < min(end for _, end in spans), "all three overlapped"
    assert result["turns"] == 2 and len(_messages(mock)) == 2, "all results went back in one message"


def test_the_loop_detector_stops_an_agent_on_a_worker(fleet: Fleet, mock: MockMessagesServer) -> None:
    run = fleet.map(at.lookup_agent, [{"prompt": 'LOOP lookup {"q": "again"}'}])
    outcome = _one(run)
    assert not outcome.ok and outcome.dead_lettered, outcome
    assert (outcome.error_type, outcome.attempts) == ("LoopDetected", 1)
    assert len(_messages(mock)) == 5, "the default loop_limit is five identical calls"
    (entry,) = fleet.dlq.list(run_id=run.id)
    assert entry.category == "loop_detected" or entry.error_type == "LoopDetected"


def test_a_dollar_budget_stops_an_agent_on_a_worker(fleet: Fleet, mock: MockMessagesServer) -> None:
    outcome = _one(fleet.map(at.penny_agent, [{"prompt": 'CALL lookup {"q": "x"}'}]))
    assert not outcome.ok and outcome.dead_lettered, outcome
    assert (outcome.error_type, outcome.attempts) == ("BudgetExceeded", 1)
    assert "budget" in (outcome.error or "")
    assert len(_messages(mock)) == 1, "the second model call was never sent"
    assert outcome.cost_usd > 1e-6


# Credentials and the SSRF guard ------------------------------------------------------------------


def _values_of(client: redis.Redis, key: bytes) -> list[bytes]:
    kind = client.type(key).decode()
    if kind == "string":
        return [client.get(key) or b""]
    if kind == "hash":
        return [b for pair in client.hgetall(key).items() for b in pair]
    if kind == "list":
        return list(client.lrange(key, 0, -1))
    if kind == "set":
        return list(client.smembers(key))
    if kind == "zset":
        return [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
    if kind == "stream":
        return [b for _, fields in client.xrange(key) for pair in fields.items() for b in pair]
    return []


def _redis_holding(redis_url: str, needle: bytes) -> list[str]:
    """Every key of every type in the whole Redis whose name or any value contains ``needle``."""
    client = redis.Redis.from_url(redis_url)
    found = []
    kinds: set[str] = set()
    try:
        for key in client.scan_iter(count=1000):
            kinds.add(client.type(key).decode())
            if needle in key or any(needle in value for value in _values_of(client, key)):
                found.append(key.decode(errors="replace"))
    finally:
        client.close()
    assert {"string", "hash", "stream"} <= kinds, f"the scan saw only {kinds}"
    return found


def test_a_canary_credential_used_by_20_tasks_leaks_nowhere(
    fleet: Fleet, acluster: LocalCluster, vendor: ScriptedServer, redis_url: str, prefix: str
) -> None:
    vendor.script("/ok", Reply(200, {"ok": True}))
    vendor.script("/denied", Reply(403, {"error": "no"}))
    inputs = [
        {"url": vendor.url("/denied" if i % 5 == 4 else "/ok"), "where": "query" if i % 2 else "header"}
        for i in range(SECRET_TASKS)
    ]
    run = fleet.map(at.call_with_credential, inputs)
    summary = run.wait(timeout_s=90)
    assert (summary.succeeded, summary.dead_lettered) == (16, 4), summary

    hits = vendor.hits("/ok") + vendor.hits("/denied")
    assert len(hits) == SECRET_TASKS, "a 403 is permanent: one request each"
    sent = [h.headers.get("authorization", "") for h in hits]
    assert sent.count(f"Bearer {CANARY}") == SECRET_TASKS // 2, "the header form reached the wire"

    needle = CANARY.encode()
    outcomes = run.outcomes()
    assert needle not in json.dumps([o.model_dump(mode="json") for o in outcomes]).encode()
    dead = fleet.dlq.list(run_id=run.id)
    assert len(dead) == 4 and all(e.error_type == "AuthError" for e in dead)
    assert needle not in json.dumps([e.model_dump(mode="json") for e in dead]).encode()
    assert _redis_holding(redis_url, needle) == []
    logs = "".join(w.log_text() for w in acluster.workers)
    assert at.call_with_credential.name in logs, "the worker logs were captured"
    assert CANARY not in logs

    audit = AuditLog(redis.Redis.from_url(redis_url), prefix).read(count=1000)
    uses = [e for e in audit if e.credential == "vendor" and e.task_id.startswith(run.id)]
    assert sorted(e.task_id for e in uses) == sorted(o.task_id for o in outcomes)
    assert {e.domain for e in uses} == {"127.0.0.1"}


def test_a_credential_is_refused_for_a_domain_it_is_not_allowed_for(
    fleet: Fleet, vendor: ScriptedServer, redis_url: str, prefix: str
) -> None:
    vendor.script("/elsewhere", Reply(200, {"ok": True}))
    url = vendor.url("/elsewhere").replace("127.0.0.1", "localhost")
    run = fleet.map(at.call_with_credential, [{"url": url}])
    outcome = _one(run)
    assert not outcome.ok and outcome.attempts == 1, outcome
    assert outcome.error_type == "ForbiddenDestination"
    assert vendor.hits("/elsewhere") == []
    (entry,) = fleet.dlq.list(run_id=run.id)
    assert CANARY not in entry.model_dump_json()
    audit = AuditLog(redis.Redis.from_url(redis_url), prefix).read(count=1000)
    assert not [e for e in audit if e.task_id == outcome.task_id]


def _canary_on_127_0_0_2() -> Iterator[ScriptedServer]:
    probe = socket.socket()
    try:
        probe.bind(("127.0.0.2", 0))
    except OSError:
        pytest.skip("cannot bind 127.0.0.2")
    finally:
        probe.close()
    with ScriptedServer(host="127.0.0.2") as server:
        yield server


@pytest.fixture
def private_canary() -> Iterator[ScriptedServer]:
    yield from _canary_on_127_0_0_2()


def test_ctx_http_on_a_worker_refuses_a_private_address_not_allowlisted(
    fleet: Fleet, private_canary: ScriptedServer
) -> None:
    private_canary.script("/internal", Reply(200, {"secret": "internal"}))
    urls = [private_canary.url("/internal"), "http://169.254.169.254/latest/meta-data/"]
    run = fleet.map(at.fetch, [{"url": url} for url in urls])
    summary = run.wait(timeout_s=60)
    assert summary.dead_lettered == 2, summary
    for outcome in run.outcomes():
        assert (outcome.error_type, outcome.attempts) == ("ForbiddenDestination", 1), outcome
    assert private_canary.hits("/internal") == []
