"""agentfleet.testing: a fleet task's function run in a unit test, without Celery or Redis."""

from __future__ import annotations

import httpx
import pytest
import testing_seam_tasks as tasks

from agentfleet.config import load_settings
from agentfleet.errors import ConfigError
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.testing import LocalMemory, run_task

URL = "https://vendor-a.example/p/1"


def test_ctx_http_answers_from_a_handler_and_the_result_comes_back_as_an_outcome() -> None:
    seen: list[str] = []

    def vendor(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, json={"price": 12})

    outcome = run_task(tasks.price, {"url": URL}, http=vendor, attempt=2)
    assert (outcome.ok, outcome.result) == (True, {"price": 12, "attempt": 2})
    assert seen == [URL]
    assert outcome.attempts == 1 and outcome.duration_s >= 0


def test_ctx_http_takes_an_httpx_mock_transport_too() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json={"price": 3}))
    assert run_task(tasks.price, {"url": URL}, http=transport).result == {"price": 3, "attempt": 0}


def test_a_429_is_a_rate_limited_outcome_with_the_downstreams_wait() -> None:
    outcome = run_task(
        tasks.price, {"url": URL}, http=lambda r: httpx.Response(429, headers={"retry-after": "7"})
    )
    assert (outcome.ok, outcome.error_type, outcome.category) == (False, "RateLimited", "rate_limited")


def test_a_5xx_raised_by_the_task_is_classified_as_a_worker_would() -> None:
    outcome = run_task(tasks.price, {"url": URL}, http=lambda r: httpx.Response(503))
    assert (outcome.error_type, outcome.category) == ("DownstreamError", "downstream_error")


def test_invalid_input_fails_before_the_body_runs() -> None:
    calls: list[httpx.Request] = []
    outcome = run_task(tasks.price, {"link": URL}, http=lambda r: calls.append(r) or httpx.Response(200))
    assert (outcome.ok, outcome.error_type) == (False, "InvalidInput")
    assert "url" in (outcome.error or "") and calls == []


def test_the_tasks_own_permanent_types_come_first() -> None:
    outcome = run_task(tasks.refuses)
    assert (outcome.ok, outcome.error_type, outcome.category) == (False, "PermanentError", "permanent")
    assert "the vendor refused this item" in (outcome.error or "")


def test_without_a_handler_no_request_leaves_the_test() -> None:
    outcome = run_task(tasks.price, {"url": URL})
    assert outcome.ok is False and "pass http= to run_task" in (outcome.error or "")


def test_ctx_anthropic_calls_the_mock_and_the_usage_is_priced() -> None:
    settings = load_settings()
    with MockMessagesServer() as mock:
        outcome = run_task(tasks.label, {"text": "I love it, wonderful"}, anthropic=mock, settings=settings)
        [request] = [r for r in mock.requests if r.path == "/v1/messages"]
    assert outcome.ok and outcome.result == {"label": "positive"}
    price = settings.llm.prices[settings.llm.default_model]
    assert outcome.cost_usd >= request.input_tokens * price.input_per_mtok / 1e6 > 0


def test_a_task_budget_stops_the_next_call_without_a_worker() -> None:
    settings = load_settings(budgets={"task_tokens": 1})
    with MockMessagesServer() as mock:
        outcome = run_task(tasks.label_twice, {"text": "fine"}, anthropic=mock.url, settings=settings)
        calls = [r for r in mock.requests if r.path == "/v1/messages"]
    assert (outcome.ok, outcome.error_type) == (False, "BudgetExceeded")
    assert len(calls) == 1


def test_a_claim_lost_from_the_start_stops_the_first_fleet_call() -> None:
    tasks.fetched.clear()
    memory = LocalMemory()
    outcome = run_task(tasks.pages, {"n": 3}, claim_lost_after_s=0, memory=memory)
    assert (outcome.ok, outcome.error_type, outcome.category) == (False, "ClaimLost", "claim_lost")
    assert "no longer holds the claim" in (outcome.error or "") and tasks.fetched == []
    # A second execution, holding its claim, runs every step.
    again = run_task(tasks.pages, {"n": 3}, memory=memory)
    assert again.result == {"done": [0, 1, 2], "claim_lost": False} and tasks.fetched == [0, 1, 2]


def test_a_claim_lost_midway_stops_the_body_at_its_next_fleet_call() -> None:
    tasks.fetched.clear()
    memory = LocalMemory()
    outcome = run_task(tasks.pages, {"n": 100, "pause_s": 0.05}, claim_lost_after_s=1.0, memory=memory)
    assert (outcome.ok, outcome.error_type) == (False, "ClaimLost")
    # It stopped short of its 100 pages (about 20 at 0.05 s each; bounded loosely for a busy
    # machine), and what it fetched is kept: the next execution fetches only the rest.
    before = list(tasks.fetched)
    assert 1 <= len(before) < 100 and before == list(range(len(before)))
    assert run_task(tasks.pages, {"n": 100}, memory=memory).ok
    assert tasks.fetched == list(range(100))


def test_a_body_with_no_fleet_call_after_the_loss_ends_as_it_would_have() -> None:
    outcome = run_task(tasks.quiet, claim_lost_after_s=0)
    assert outcome.ok and outcome.result == {"claim_lost": True}
    assert run_task(tasks.quiet).result == {"claim_lost": False}


def test_a_negative_or_nan_claim_loss_is_refused_by_name() -> None:
    for bad in (-1.0, float("nan")):
        with pytest.raises(ConfigError, match="claim_lost_after_s"):
            run_task(tasks.quiet, claim_lost_after_s=bad)
