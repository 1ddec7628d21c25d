"""Steps and agent checkpoints in one process (``agentfleet.testing.run_task``, the mock
Messages API over HTTP): what a second execution of the same item finds in its memory."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentfleet import TaskContext, Tool, fleet_task, run_agent
from agentfleet.config import reset_settings
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.testing import LocalMemory, run_task

MODEL = "claude-haiku-4-5"
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
calls: list[str] = []


def _record(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    calls.append(ctx.idempotency_key)
    return {"ok": True}


TOOLS = [Tool(name, f"The {name} tool.", SCHEMA, _record) for name in ("a", "b", "c")]


@fleet_task(name="test.steps.draw")
def draw(ctx: TaskContext, fail: bool = False) -> dict[str, Any]:
    first = ctx.step("draw", lambda: (calls.append("draw") or len(calls), "x"))
    second = ctx.step("draw", lambda: calls.append("draw again") or len(calls))
    if fail:
        raise RuntimeError("after the steps")
    return {"first": first, "second": second}


@fleet_task(name="test.steps.broken")
def broken_step(ctx: TaskContext) -> int:
    def fails() -> int:
        calls.append("tried")
        raise ValueError("no luck")

    return int(ctx.step("fails", fails))


@fleet_task(name="test.steps.agent")
def chain(ctx: TaskContext, prompt: str) -> dict[str, Any]:
    return run_agent(ctx, prompt=prompt, tools=TOOLS, model=MODEL).as_dict()


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh(mock: MockMessagesServer) -> None:
    calls.clear()
    mock.reset()


def _answered(mock: MockMessagesServer) -> list[str | None]:
    return [r.conversation for r in mock.requests if r.path == "/v1/messages" and r.status == 200]


def test_a_stored_step_comes_back_without_running_again() -> None:
    memory = LocalMemory()
    first = run_task(draw, {"fail": True}, memory=memory)
    assert first.error_type == "UnexpectedError"
    second = run_task(draw, {}, memory=memory, attempt=1)
    assert second.result == {"first": [1, "x"], "second": 2}, "as JSON gives it back, a tuple as a list"
    assert calls == ["draw", "draw again"], "each call of the step ran once"


def test_a_step_that_raises_stores_nothing() -> None:
    memory = LocalMemory()
    for _ in range(2):
        assert run_task(broken_step, {}, memory=memory).error_type == "UnexpectedError"
    assert calls == ["tried", "tried"]
    assert memory.fields == {}


def test_an_agent_resumes_from_its_checkpoint_without_repeating_calls(mock: MockMessagesServer) -> None:
    memory = LocalMemory()
    mock.script([200, 200, {"status": 500}])
    failed = run_task(chain, {"prompt": "CHAIN a, b, c"}, anthropic=mock, memory=memory)
    assert failed.error_type == "DownstreamError"
    resumed = run_task(chain, {"prompt": "CHAIN a, b, c"}, anthropic=mock, memory=memory, attempt=1)
    assert resumed.ok and resumed.result["turns"] == 4
    answered = _answered(mock)
    assert len(answered) == len(set(answered)) == 4, "no model call answered twice"
    assert len(calls) == len(set(calls)) == 3, "each tool ran once, under a key of its own"


def test_a_checkpoint_of_another_conversation_is_not_resumed(mock: MockMessagesServer) -> None:
    memory = LocalMemory()
    mock.script([200, {"status": 500}])
    run_task(chain, {"prompt": "CHAIN a, b"}, anthropic=mock, memory=memory)
    other = run_task(chain, {"prompt": "CHAIN c"}, anthropic=mock, memory=memory)
    assert other.ok and other.result["turns"] == 2
    assert [c["name"] for c in other.result["tool_calls"]] == ["c"]


def test_inside_a_tool_the_idempotency_key_names_the_tool_call(mock: MockMessagesServer) -> None:
    outcome = run_task(chain, {"prompt": "CHAIN a, b"}, anthropic=mock)
    assert outcome.ok
    assert [key.split(":", 1)[0] for key in calls] == ["test", "test"]
    assert len({key.rsplit(":", 1)[1] for key in calls}) == 2
    assert all(key.rsplit(":", 1)[1].startswith("toolu_") for key in calls)


def test_without_checkpoints_nothing_is_written(
    mock: MockMessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTFLEET_AGENT__CHECKPOINT", "false")
    reset_settings()
    memory = LocalMemory()
    assert run_task(chain, {"prompt": "CHAIN a"}, anthropic=mock, memory=memory).ok
    assert memory.fields == {}
