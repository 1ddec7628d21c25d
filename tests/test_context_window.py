"""A Messages request larger than its model's context window fails permanently, unsent: the
mock Messages API (over real HTTP) never sees it, so it cannot answer a 429 that pauses the
model for every worker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import testing_seam_tasks as tasks

from agentfleet.config import load_settings
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.testing import run_task


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


def test_an_input_larger_than_the_context_window_fails_for_good_without_being_sent(
    mock: MockMessagesServer,
) -> None:
    before = len(mock.requests)
    outcome = run_task(tasks.label, {"text": "great value " * 80_000}, anthropic=mock)
    assert (outcome.ok, outcome.error_type, outcome.category) == (
        False,
        "ContextWindowExceeded",
        "context_window",
    )
    assert "more than claude-haiku-4-5's context window of 200,000" in (outcome.error or "")
    assert len(mock.requests) == before


def test_the_window_is_a_setting_per_model(mock: MockMessagesServer) -> None:
    tiny = load_settings(llm={"context_windows": {"claude-haiku-4-5": 10}})
    refused = run_task(tasks.label, {"text": "great"}, anthropic=mock, settings=tiny)
    assert refused.error_type == "ContextWindowExceeded"
    unlisted = load_settings(llm={"context_windows": {}})
    assert run_task(tasks.label, {"text": "great"}, anthropic=mock, settings=unlisted).ok
