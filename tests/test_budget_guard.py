"""The budget guard in one process, on the real clients and transport (the mock Messages API
over HTTP, the session's Redis): the fleet's daily cap, and spending counted across executions
of one item as its attempts are."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from agentfleet.config import get_settings, reset_settings
from agentfleet.errors import BudgetExceeded, fleet_error_in_chain
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.runs import BudgetLedger
from agentfleet.tasks import clients
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.execution_state import new_context

MODEL = "claude-haiku-4-5"


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


@pytest.fixture
def make_ctx(
    mock: MockMessagesServer, redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., TaskContext]]:
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", redis_url)
    monkeypatch.setenv("AGENTFLEET_KEY_PREFIX", key_prefix)
    monkeypatch.setenv("AGENTFLEET_LLM__BASE_URL", mock.url)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    made: list[TaskContext] = []

    def make(key: str, **state: Any) -> TaskContext:
        ctx = new_context(
            task_id=f"task-{len(made)}",
            run_id="run",
            item_key=key,
            idempotency_key=key,
            attempt=0,
            log=logging.LoggerAdapter(logging.getLogger("test.budgets"), {}),
            http_factory=clients.http_client,
            anthropic_factory=clients.anthropic_client,
            **state,
        )
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.close()


def _call(ctx: TaskContext) -> None:
    """One model call; a fleet error the SDK wrapped is raised as itself, as a task's is."""
    try:
        ctx.anthropic.messages.create(
            model=MODEL, max_tokens=200, messages=[{"role": "user", "content": "LONG 150"}]
        )
    except Exception as exc:
        raise fleet_error_in_chain(exc) or exc from None


def test_the_fleets_daily_cap_stops_every_item_once_reached(
    make_ctx: Callable[..., TaskContext], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AGENTFLEET_BUDGETS__FLEET_DAILY_USD", "0.002")
    reset_settings()
    first, second = make_ctx("k1"), make_ctx("k2")
    with caplog.at_level(logging.WARNING, logger="agentfleet.budgets"), pytest.raises(BudgetExceeded):
        while True:
            _call(first)
    with pytest.raises(
        BudgetExceeded, match=r"the fleet spent \$0\.00\d+ of its \$0\.0020 daily budget today"
    ):
        _call(second)
    assert second.cost_usd == 0, "the other item's call was refused before it was sent"
    levels = [r.getMessage() for r in caplog.records if '"event": "budget_alert"' in r.getMessage()]
    assert len(levels) == 2 and '"level": "soft"' in levels[0] and '"level": "hard"' in levels[1]


def test_an_items_spending_carries_over_to_its_next_execution(
    make_ctx: Callable[..., TaskContext], redis_client: redis.Redis
) -> None:
    reset_settings()
    first = make_ctx("item", budget_usd=0.01)
    _call(first)
    first.close()
    prefix = get_settings().key_prefix
    ledger = BudgetLedger(redis_client, prefix=prefix)
    spent = ledger.item("item")
    assert spent.usd == pytest.approx(first.cost_usd) and spent.turns == 1
    assert spent.seconds > 0, "the execution's seconds were counted when it ended"
    again = make_ctx("item", budget_usd=spent.usd * 1.5, prior=spent)
    _call(again)
    with pytest.raises(BudgetExceeded, match="over every attempt"):
        _call(again)
