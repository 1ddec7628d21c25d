"""The agent loop: a model, tools it may call (several at once), and the guards around them.

``run_agent(ctx, prompt=..., tools=[...])`` talks to the Messages API through ``ctx.anthropic``
(so limits, credentials, cost and budgets apply) until the model ends its turn:

- when one response asks for several tools, they run concurrently and every ``tool_result``
  goes back in one user message, each with its ``tool_use_id``;
- a tool that raises becomes a ``tool_result`` with ``is_error`` (the model sees the error
  and can adapt); only ``BudgetExceeded`` and ``LoopDetected`` stop the agent; a tool held up
  by a rate limit (a limiter deferral, a 429) waits and tries again for up to
  ``agent.tool_wait_s`` seconds first, so the conversation is not lost to a short wait;
- a configured credential's value in a tool's output (a server that echoes a header, say) is
  put back as its ``$CRED{name}`` placeholder before the model, or the result, sees it;
- the same tool call with the same input ``loop_limit`` times in a row stops the agent with
  ``LoopDetected``; ``max_turns`` model calls without an end, or crossing the task's dollar,
  token or wall-clock budget, stop it with ``BudgetExceeded``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

from agentfleet.config import get_settings
from agentfleet.errors import BudgetExceeded, Deferred, LoopDetected, RateLimited, fleet_error_in_chain
from agentfleet.idempotency import canonical_json
from agentfleet.tasks.context import TaskContext
from agentfleet.tools.vault import CredentialVault

__all__ = ["AgentResult", "Tool", "ToolCall", "run_agent"]

ToolFn = Callable[[TaskContext, dict[str, Any]], Any]
_STOPPING = (BudgetExceeded, LoopDetected)


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its schema, and ``fn(ctx, input) -> result`` (JSON or text)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    fn: ToolFn

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass(frozen=True)
class ToolCall:
    """One tool call the agent made, and how it went."""

    name: str
    input: dict[str, Any]
    is_error: bool
    duration_s: float


@dataclass
class AgentResult:
    """The agent's final text, how many model calls (turns) it took, and its tool calls."""

    text: str
    turns: int
    stop_reason: str
    model: str
    tool_calls: list[ToolCall] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "turns": self.turns,
            "stop_reason": self.stop_reason,
            "model": self.model,
            "tool_calls": [call.__dict__ for call in self.tool_calls],
        }


class _LoopDetector:
    """Counts identical consecutive tool calls (same name, same canonical input)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.last: str | None = None
        self.repeats = 0

    def see(self, name: str, tool_input: Any) -> None:
        signature = f"{name}:{canonical_json(tool_input)}"
        self.repeats = self.repeats + 1 if signature == self.last else 1
        self.last = signature
        if self.repeats >= self.limit:
            raise LoopDetected(f"the agent called {name} with the same input {self.repeats} times in a row")


def _render(result: Any) -> str:
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(result)


def _call_waiting(ctx: TaskContext, tool: Tool, args: dict[str, Any], wait_s: float) -> Any:
    """``tool.fn``, called again after a rate limit's wait while ``wait_s`` seconds last."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return tool.fn(ctx, dict(args))
        except (Deferred, RateLimited) as exc:
            pause = exc.wait_s if isinstance(exc, Deferred) else (exc.retry_after_s or 1.0)
            if time.monotonic() + pause > deadline:
                raise
            ctx.log.info("tool %s waits %.2f s for %s", tool.name, pause, exc.downstream or "a limit")
            time.sleep(pause)


def _run_tool(
    ctx: TaskContext, tools: dict[str, Tool], block: Any, scrub: Callable[[str], str], wait_s: float
) -> tuple[dict[str, Any], ToolCall]:
    started = time.monotonic()
    tool = tools.get(block.name)
    is_error = False
    try:
        if tool is None:
            raise KeyError(f"no tool named {block.name!r}")
        content = _render(_call_waiting(ctx, tool, dict(block.input or {}), wait_s))
    except _STOPPING:
        raise
    except Exception as exc:
        is_error = True
        content = f"{type(exc).__name__}: {exc}"
    content = scrub(content)
    if is_error:
        ctx.log.info("tool %s failed: %s", block.name, content)
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.id, "content": content}
    if is_error:
        result["is_error"] = True
    call = ToolCall(block.name, dict(block.input or {}), is_error, round(time.monotonic() - started, 4))
    return result, call


def _unchanged(text: str) -> str:
    return text


def _content_params(content: Sequence[Any]) -> list[dict[str, Any]]:
    params = []
    for block in content:
        if block.type == "text":
            params.append({"type": "text", "text": block.text})
        elif block.type == "tool_use":
            params.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
    return params


def run_agent(
    ctx: TaskContext,
    *,
    prompt: str | list[dict[str, Any]],
    tools: Sequence[Tool] = (),
    system: str | None = None,
    model: str | None = None,
    max_turns: int | None = None,
    max_tokens: int = 1024,
    loop_limit: int | None = None,
    max_parallel_tools: int | None = None,
) -> AgentResult:
    """Run the agent until the model ends its turn; see the module docstring for the guards.

    ``prompt`` is the first user message's text, or a whole message list. ``model`` defaults
    to ``llm.default_model``; ``max_tokens`` caps each model call's output tokens.
    """
    settings = get_settings()
    model = model or settings.llm.default_model
    max_turns = max_turns or settings.agent.max_turns
    detector = _LoopDetector(loop_limit or settings.agent.loop_limit)
    workers = max_parallel_tools or settings.agent.max_parallel_tools
    tool_wait_s = settings.agent.tool_wait_s
    by_name = {tool.name: tool for tool in tools}
    scrub = CredentialVault(settings.credentials).scrub if settings.credentials else _unchanged
    messages: list[dict[str, Any]] = (
        [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    )
    request: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if system:
        request["system"] = system
    if tools:
        request["tools"] = [tool.spec() for tool in tools]
    calls: list[ToolCall] = []
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent-tool") as pool:
        for turn in range(1, max_turns + 1):
            ctx.check_budget()
            try:
                response = ctx.anthropic.messages.create(messages=cast(Any, messages), **request)
            except Exception as exc:
                # The SDK wraps what the fleet transport raised (a budget, a deferral): unwrap it.
                ours = fleet_error_in_chain(exc)
                if ours is None:
                    raise
                raise ours from None
            uses = [block for block in response.content if block.type == "tool_use"]
            if response.stop_reason != "tool_use" or not uses:
                text = "".join(block.text for block in response.content if block.type == "text")
                return AgentResult(text, turn, str(response.stop_reason), model, calls)
            for block in uses:
                detector.see(block.name, block.input)
            messages.append({"role": "assistant", "content": _content_params(response.content)})
            outcomes = list(pool.map(lambda block: _run_tool(ctx, by_name, block, scrub, tool_wait_s), uses))
            calls.extend(call for _, call in outcomes)
            messages.append({"role": "user", "content": [result for result, _ in outcomes]})
    raise BudgetExceeded(f"the agent did not finish within max_turns ({max_turns}) model calls")
