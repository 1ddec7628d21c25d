"""The agent loop: a model, tools it may call (several at once), and the guards around them.

``run_agent(ctx, prompt=..., tools=[...])`` talks to the Messages API through ``ctx.anthropic``
(so limits, credentials, cost and budgets apply) until the model ends its turn:

- when one response asks for several tools, they run concurrently and every ``tool_result``
  goes back in one user message, each with its ``tool_use_id``;
- the conversation is checkpointed in the item's memory after every model turn and every
  tool result (``tasks/checkpoint.py``; off with ``agent.checkpoint = false``): a retry, a
  redelivery after a crash, a deferral or a requeue resumes at the last checkpoint, repeating
  at most the model call that was under way and no tool call that had returned. Inside a
  tool, ``ctx.idempotency_key`` names the tool call (the item's key and its ``tool_use`` id,
  the same on every resume): pass it on, and a tool cut off mid-way repeats no effect;
- a ``Tool(..., requires_approval=True)`` call waits for a person's decision first, parked
  off its slot; a rejection reaches the model as the tool's result (``tasks/agent_approval.py``);
- a tool that raises becomes a ``tool_result`` with ``is_error`` (the model sees the error
  and can adapt); only ``BudgetExceeded``, ``LoopDetected`` and ``ClaimLost`` stop the agent;
- a tool held up by a rate limit (a limiter deferral, a 429) reschedules the item for the
  wait, freeing its worker slot, and the agent resumes from its checkpoint; without a stored
  checkpoint it waits in its slot instead. Past ``agent.tool_wait_s`` seconds of waiting in
  all, the model is told the tool failed;
- a configured credential's value in a tool's output (a server that echoes a header, say) is
  put back as its ``$CRED{name}`` placeholder before the model, or the result, sees it;
- the same tool call with the same input ``loop_limit`` times in a row stops the agent with
  ``LoopDetected``; ``max_turns`` model calls without an end (over every resume), or crossing
  the task's dollar, token, turn or wall-clock budget, stop it with ``BudgetExceeded``;
- once the delivery no longer holds its item's claim (``ctx.claim_lost``), the next model call,
  tool call or checkpoint raises ``ClaimLost``: another delivery may be running the item.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

from agentfleet import tracing
from agentfleet.config import AgentSettings, get_settings
from agentfleet.errors import (
    BudgetExceeded,
    ClaimLost,
    Deferred,
    LoopDetected,
    Parked,
    RateLimited,
    fleet_error_in_chain,
)
from agentfleet.idempotency import canonical_json
from agentfleet.tasks.agent_approval import ask
from agentfleet.tasks.checkpoint import AgentCheckpoint, Checkpointer, StoredTool
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.execution_state import call_context, execution_of
from agentfleet.tools.vault import CredentialVault

__all__ = ["AgentResult", "Tool", "ToolCall", "run_agent"]

ToolFn = Callable[[TaskContext, dict[str, Any]], Any]
_STOPPING = (BudgetExceeded, LoopDetected, ClaimLost)


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: its schema, and ``fn(ctx, input) -> result`` (JSON or text).

    ``requires_approval``: each call waits for a person's decision first, parked off its slot
    (``tasks/agent_approval.py``), for at most ``approval_timeout_s`` seconds (None: no limit).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    fn: ToolFn
    requires_approval: bool = False
    approval_timeout_s: float | None = None

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


def _tool_uses(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return []
    return [block for block in content if block.get("type") == "tool_use"]


class _WaitElsewhere(Exception):
    """A tool must wait for a rate limit: the item is rescheduled with ``deferred``."""

    def __init__(self, deferred: Deferred) -> None:
        super().__init__(str(deferred))
        self.deferred = deferred


class _Agent:
    """One ``run_agent`` call: its settings, tools, checkpoints and progress."""

    def __init__(
        self,
        ctx: TaskContext,
        progress: AgentCheckpoint,
        *,
        tools: dict[str, Tool],
        checkpointer: Checkpointer | None,
        settings: AgentSettings,
        loop_limit: int,
        scrub: Callable[[str], str],
    ) -> None:
        self.ctx = ctx
        self.progress = progress
        self.tools = tools
        self.checkpointer = checkpointer
        self.settings = settings
        self.scrub = scrub
        self.detector = _LoopDetector(loop_limit)
        # Only a checkpoint that outlives this execution makes a reschedule worth more than a wait.
        self.reschedules = checkpointer is not None and execution_of(ctx).memory.durable
        for message in progress.messages:
            for block in _tool_uses(message):
                self.detector.see(block["name"], block["input"])

    def save(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.save(self.progress)

    def result(self, model: str) -> AgentResult:
        final = self.progress.final or {}
        calls = [ToolCall(**call) for call in self.progress.calls]
        return AgentResult(
            final.get("text", ""), self.progress.turns, final.get("stop_reason", ""), model, calls
        )

    def run(self, request: dict[str, Any], max_turns: int, workers: int) -> AgentResult:
        progress = self.progress
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="agent-tool") as pool:
            while progress.final is None:
                pending = _tool_uses(progress.messages[-1]) if progress.messages else []
                if pending:
                    self.answer_tools(pool, pending)
                if progress.turns >= max_turns:
                    raise BudgetExceeded(
                        f"the agent did not finish within max_turns ({max_turns}) model calls"
                    )
                self.turn(request)
        return self.result(str(request["model"]))

    def turn(self, request: dict[str, Any]) -> None:
        """One model call; its reply is checkpointed before any tool it asks for runs."""
        self.ctx.check_claim()
        self.ctx.check_budget()
        try:
            response = self.ctx.anthropic.messages.create(
                messages=cast(Any, self.progress.messages), **request
            )
        except Exception as exc:
            # The SDK wraps what the fleet transport raised (a budget, a deferral): unwrap it.
            ours = fleet_error_in_chain(exc)
            if ours is None:
                raise
            raise ours from None
        self.progress.turns += 1
        content = _content_params(response.content)
        uses = [block for block in content if block["type"] == "tool_use"]
        if response.stop_reason != "tool_use" or not uses:
            text = "".join(block["text"] for block in content if block["type"] == "text")
            self.progress.final = {"text": text, "stop_reason": str(response.stop_reason)}
        else:
            for block in uses:
                self.detector.see(block["name"], block["input"])
            self.progress.messages.append({"role": "assistant", "content": content})
        self.save()

    def answer_tools(self, pool: ThreadPoolExecutor, uses: list[dict[str, Any]]) -> None:
        """Run the tools the last reply asked for (those not already returned), then send
        every result back in one message."""
        done = self.checkpointer.tools([b["id"] for b in uses]) if self.checkpointer else {}
        todo = [b for b in uses if b["id"] not in done]
        try:
            # Each call runs in the current span's context (a thread pool carries none itself).
            calls = [tracing.bind(self.call_tool) for _ in todo]
            results = pool.map(lambda call, block: call(block), calls, todo)
            for block, stored in zip(todo, results, strict=True):
                done[block["id"]] = stored
        except _WaitElsewhere as wait:
            raise wait.deferred from None
        answered = [done[b["id"]] for b in uses]
        self.progress.calls.extend(s.call for s in answered)
        self.progress.messages.append({"role": "user", "content": [s.result for s in answered]})
        self.save()

    def call_tool(self, block: dict[str, Any]) -> StoredTool:
        """One tool call, in its span when tracing is on (GenAI ``execute_tool``)."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": block["name"],
            "gen_ai.tool.call.id": block["id"],
        }
        with tracing.span(f"execute_tool {block['name']}", attributes=attributes) as span:
            stored = self._call_tool(block)
            if stored.call.get("is_error"):
                span.fail("the tool raised")
            return stored

    def _call_tool(self, block: dict[str, Any]) -> StoredTool:
        started = time.monotonic()
        tool = self.tools.get(block["name"])
        is_error = False
        # A tool is not started once another delivery may be running the item.
        self.ctx.check_claim()
        try:
            if tool is None:
                raise KeyError(f"no tool named {block['name']!r}")
            arguments = dict(block["input"] or {})
            gate = ask(self.ctx, tool, block["id"], arguments) if tool.requires_approval else None
            if gate is not None and gate.refusal is not None:
                is_error, content = True, gate.refusal
            else:
                content = _render(self.invoke(tool, block, gate.arguments if gate else arguments))
        except (*_STOPPING, _WaitElsewhere, Parked):
            raise
        except Exception as exc:
            # A client may wrap what stops the agent (the SDK wraps what its transport raised).
            stopping = fleet_error_in_chain(exc)
            if isinstance(stopping, _STOPPING):
                raise stopping from None
            is_error = True
            content = f"{type(exc).__name__}: {exc}"
        content = self.scrub(content)
        if is_error:
            self.ctx.log.info("tool %s failed: %s", block["name"], content)
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block["id"], "content": content}
        if is_error:
            result["is_error"] = True
        call = ToolCall(
            block["name"], dict(block["input"] or {}), is_error, round(time.monotonic() - started, 4)
        )
        stored = StoredTool(result, call.__dict__)
        if self.checkpointer is not None:
            self.checkpointer.save_tool(block["id"], stored)
        return stored

    def invoke(self, tool: Tool, block: dict[str, Any], arguments: dict[str, Any]) -> Any:
        """``tool.fn`` for one call; a rate limit reschedules the item (or, without a stored
        checkpoint, is waited out here) while ``agent.tool_wait_s`` lasts in all."""
        ctx = call_context(self.ctx, block["id"])
        budget_s = self.settings.tool_wait_s
        deadline = time.monotonic() + budget_s
        while True:
            try:
                return tool.fn(ctx, dict(arguments))
            except (Deferred, RateLimited) as exc:
                pause = exc.wait_s if isinstance(exc, Deferred) else (exc.retry_after_s or 1.0)
                where = exc.downstream or "a limit"
                if self.checkpointer is not None and self.reschedules:
                    if self.checkpointer.waited(block["id"]) + pause > budget_s:
                        raise
                    self.checkpointer.add_wait(block["id"], pause)
                    self.ctx.log.info("tool %s waits %.2f s for %s off its slot", tool.name, pause, where)
                    raise _WaitElsewhere(Deferred(pause, f"tool {tool.name} waits for {where}")) from None
                if time.monotonic() + pause > deadline:
                    raise
                self.ctx.log.info("tool %s waits %.2f s for %s", tool.name, pause, where)
                time.sleep(pause)


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
    to ``llm.default_model``; ``max_tokens`` caps each model call's output tokens. A later
    execution of the same item resumes from this call's checkpoint (the ``n``-th
    ``run_agent`` call of an execution resumes the ``n``-th one's).
    """
    settings = get_settings()
    model = model or settings.llm.default_model
    request: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if system:
        request["system"] = system
    if tools:
        request["tools"] = [tool.spec() for tool in tools]
    messages: list[dict[str, Any]] = (
        [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    )
    checkpointer = None
    progress = AgentCheckpoint(fingerprint="", messages=messages)
    if settings.agent.checkpoint:
        fingerprint = Checkpointer.fingerprint_of(prompt=prompt, **request)
        checkpointer = Checkpointer(
            execution_of(ctx).memory, execution_of(ctx).next_call("agent"), fingerprint
        )
        progress = checkpointer.load() or AgentCheckpoint(fingerprint=fingerprint, messages=messages)
        if progress.turns:
            ctx.log.info("agent resumes after %d model calls", progress.turns)
    agent = _Agent(
        ctx,
        progress,
        tools={tool.name: tool for tool in tools},
        checkpointer=checkpointer,
        settings=settings.agent,
        loop_limit=loop_limit or settings.agent.loop_limit,
        scrub=CredentialVault(settings.credentials).scrub if settings.credentials else _unchanged,
    )
    return agent.run(
        request,
        max_turns or settings.agent.max_turns,
        max_parallel_tools or settings.agent.max_parallel_tools,
    )
