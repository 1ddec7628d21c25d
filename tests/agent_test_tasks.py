"""Fleet tasks for the real-agent tests: the Anthropic SDK and ``ctx.http`` inside real workers.

Imported by workers via ``AGENTFLEET_TASK_MODULES``; the tests import them to name the tasks.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from agentfleet import TaskContext, Tool, fleet_task, run_agent

MODEL = "claude-haiku-4-5"
SLOW_TOOL_S = 1.0

_QUERY_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def _lookup(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    return {"q": args.get("q"), "answer": 42}


LOOKUP = Tool("lookup", "Look a term up.", _QUERY_SCHEMA, _lookup)


@fleet_task(max_retries=3)
def ask(ctx: TaskContext, prompt: str, max_tokens: int = 64, cached_system: str = "") -> dict[str, Any]:
    """One Messages call through ``ctx.anthropic``: its text, stop reason and usage.

    ``cached_system`` is sent as a system prompt marked for prompt caching.
    """
    options: dict[str, Any] = {}
    if cached_system:
        options["system"] = [{"type": "text", "text": cached_system, "cache_control": {"type": "ephemeral"}}]
    message = ctx.anthropic.messages.create(
        model=MODEL, max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}], **options
    )
    text = "".join(block.text for block in message.content if block.type == "text")
    return {"text": text, "stop_reason": message.stop_reason, "usage": message.usage.model_dump()}


@fleet_task(max_retries=3)
def ask_streamed(ctx: TaskContext, prompt: str, max_tokens: int = 64) -> dict[str, Any]:
    """One streamed Messages call through ``ctx.anthropic``: its text and usage."""
    with ctx.anthropic.messages.stream(
        model=MODEL, max_tokens=max_tokens, messages=[{"role": "user", "content": prompt}]
    ) as stream:
        message = stream.get_final_message()
    text = "".join(block.text for block in message.content if block.type == "text")
    return {"text": text, "stop_reason": message.stop_reason, "usage": message.usage.model_dump()}


@fleet_task(max_retries=1)
def lookup_agent(ctx: TaskContext, prompt: str) -> dict[str, Any]:
    """``run_agent`` with the ``lookup`` tool."""
    return run_agent(ctx, prompt=prompt, tools=[LOOKUP], model=MODEL).as_dict()


@fleet_task(max_retries=0)
def slow_tools_agent(ctx: TaskContext, prompt: str) -> dict[str, Any]:
    """``run_agent`` with three tools that each sleep ``SLOW_TOOL_S``; returns when each ran.

    ``spans`` maps a tool name to its (start, end) on this process's monotonic clock, seconds.
    """
    spans: dict[str, tuple[float, float]] = {}
    lock = threading.Lock()

    def sleeper(name: str) -> Tool:
        def fn(ctx: TaskContext, args: dict[str, Any]) -> str:
            started = time.monotonic()
            time.sleep(SLOW_TOOL_S)
            with lock:
                spans[name] = (started, time.monotonic())
            return f"{name} done"

        return Tool(name, f"Takes {SLOW_TOOL_S} s.", _QUERY_SCHEMA, fn)

    tools = [sleeper(name) for name in ("slow_a", "slow_b", "slow_c")]
    result = run_agent(ctx, prompt=prompt, tools=tools, model=MODEL)
    return {**result.as_dict(), "spans": spans}


@fleet_task(max_retries=3, budget_usd=1e-6)
def penny_agent(ctx: TaskContext, prompt: str) -> dict[str, Any]:
    """``run_agent`` under a one-millionth-of-a-dollar budget: its second model call is refused."""
    return run_agent(ctx, prompt=prompt, tools=[LOOKUP], model=MODEL).as_dict()


@fleet_task(max_retries=3)
def call_with_credential(ctx: TaskContext, url: str, where: str = "header") -> dict[str, Any]:
    """GET ``url`` naming the ``vendor`` credential in a header or in the query string."""
    if where == "query":
        response = ctx.http.get(url, params={"key": "$CRED{vendor}"})
    else:
        response = ctx.http.get(url, headers={"Authorization": "Bearer $CRED{vendor}"})
    response.raise_for_status()
    return {"status": response.status_code, "body": response.json()}


@fleet_task(max_retries=3)
def fetch(ctx: TaskContext, url: str) -> dict[str, Any]:
    """GET ``url`` through ``ctx.http``."""
    response = ctx.http.get(url)
    return {"status": response.status_code}
