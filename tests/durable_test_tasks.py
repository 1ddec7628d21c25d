"""Fleet tasks for the durable-execution tests: steps, resumable agents, budgets, compensations,
graph steps (imported by workers via AGENTFLEET_TASK_MODULES).

Effects go to a far end outside the worker: ``DURABLE_FAR_END`` is the base URL of a scripted
HTTP server in the test process, which records every request with its ``Idempotency-Key``
header, as an API honouring idempotency keys would see them.
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx

from agentfleet import DownstreamError, PermanentError, TaskContext, Tool, fleet_task, run_agent

MODEL = "claude-haiku-4-5"
_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def far_end(path: str) -> str:
    return os.environ["DURABLE_FAR_END"].rstrip("/") + path


def _post(ctx: TaskContext, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` to the far end under this call's idempotency key, through ``ctx.http``."""
    response = ctx.http.post(far_end(path), json=body, headers={"Idempotency-Key": ctx.idempotency_key})
    response.raise_for_status()
    return {"status": response.status_code}


# Steps --------------------------------------------------------------------------------------


@fleet_task(max_retries=2)
def draw_then_fail(ctx: TaskContext, token: str) -> dict[str, Any]:
    """A step that records a draw at the far end, then a failure on the first attempt only."""
    drawn = ctx.step("draw", lambda: _post(ctx, "/draw", {"token": token, "attempt": ctx.attempt}))
    if ctx.attempt == 0:
        raise DownstreamError("the first attempt fails after its step", status_code=503)
    return {"drawn": drawn, "attempt": ctx.attempt}


# Agents -------------------------------------------------------------------------------------


def _effect_tool(name: str) -> Tool:
    def run(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
        return _post(ctx, "/effect", {"tool": name, "q": args.get("q")})

    return Tool(name, f"Applies effect {name}.", _SCHEMA, run)


def _limited(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    response = ctx.http.get(far_end("/limited"))
    return {"status": response.status_code}


EFFECT_TOOLS = [_effect_tool(name) for name in ("tool_a", "tool_b", "tool_c", "tool_d")]
LIMITED = Tool("limited", "Calls a rate-limited vendor.", _SCHEMA, _limited)


@fleet_task(max_retries=3)
def chain_agent(ctx: TaskContext, prompt: str) -> dict[str, Any]:
    """An agent whose tools each apply an effect at the far end (``CHAIN tool_a, ...``)."""
    return run_agent(ctx, prompt=prompt, tools=[*EFFECT_TOOLS, LIMITED], model=MODEL).as_dict()


@fleet_task(max_retries=0)
def fragile_agent(ctx: TaskContext, prompt: str) -> dict[str, Any]:
    """The same agent with no retries: a failed model call dead-letters it at once."""
    return run_agent(ctx, prompt=prompt, tools=[*EFFECT_TOOLS, LIMITED], model=MODEL).as_dict()


# Budgets ------------------------------------------------------------------------------------


@fleet_task(max_retries=5, budget_turns=2)
def ask_then_fail(ctx: TaskContext, prompt: str) -> dict[str, Any]:
    """One model call per attempt, then a retryable failure: only the budget ends it."""
    ctx.anthropic.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "user", "content": prompt}])
    raise DownstreamError("fails after every call", status_code=503)


@fleet_task(max_retries=0)
def talker(ctx: TaskContext, prompt: str, calls: int = 1, max_tokens: int = 200) -> dict[str, Any]:
    """``calls`` model calls in a row (each a conversation of its own); how many it made."""
    for n in range(calls):
        ctx.anthropic.messages.create(
            model=MODEL, max_tokens=max_tokens, messages=[{"role": "user", "content": f"{prompt}\ncall {n}"}]
        )
    return {"calls": calls}


@fleet_task(time_limit_s=3, soft_time_limit_s=1.5)
def nap(ctx: TaskContext, n: int, sleep_s: float) -> dict[str, Any]:
    """Sleeps; a batch of these outruns the soft time limit unless it hands items off."""
    time.sleep(sleep_s)
    return {"n": n}


# Compensations ------------------------------------------------------------------------------


def undo_booking(ctx: TaskContext, inputs: dict[str, Any], result: Any) -> None:
    """Cancels a booking at the far end (``/undo/{n}``), under the compensation's own key."""
    _post(ctx, f"/undo/{inputs['n']}", {"n": inputs["n"], "booked": result["booked"]})


@fleet_task(max_retries=0, compensate=undo_booking)
def book(ctx: TaskContext, n: int, sleep_s: float = 0.0, fail: bool = False) -> dict[str, Any]:
    """Books item ``n`` after ``sleep_s`` seconds, or fails for good."""
    time.sleep(sleep_s)
    if fail:
        raise PermanentError(f"booking {n} is refused")
    return {"booked": n}


# Graph steps --------------------------------------------------------------------------------


@fleet_task
def fetch(ctx: TaskContext, url: str) -> dict[str, Any]:
    return {"url": url, "text": f"words of {url}"}


@fleet_task(max_retries=0)
def summarize(ctx: TaskContext, fetch: dict[str, Any], style: str = "short") -> dict[str, Any]:
    status = httpx.get(far_end("/summarize"), timeout=10).status_code
    if status >= 400:
        raise PermanentError(f"the summarizer answered {status}")
    return {"summary": f"{style}: {fetch['text'][:12]}"}


@fleet_task
def classify(ctx: TaskContext, fetch: dict[str, Any]) -> dict[str, Any]:
    return {"label": "news" if "news" in fetch["url"] else "blog"}


@fleet_task
def report(ctx: TaskContext, summarize: dict[str, Any], classify: dict[str, Any], url: str) -> dict[str, Any]:
    return {"report": f"{url} [{classify['label']}] {summarize['summary']}"}
