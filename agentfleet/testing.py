"""Run a fleet task's function in a unit test: no worker, no broker, no Redis.

::

    from agentfleet.testing import run_task

    def vendor(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"price": 12})

    outcome = run_task(extract_price, {"url": "https://vendor-a.example/p/1"}, http=vendor)
    assert outcome.ok and outcome.result == {"price": 12}

    with MockMessagesServer() as mock:                       # agentfleet.mock_llm
        outcome = run_task(classify, {"text": "great"}, anthropic=mock)
    assert outcome.result == {"label": "positive"} and outcome.cost_usd > 0

One execution runs as a worker would run it (what Celery users get from ``task.apply()``): the
input is validated against the function's type hints, the body gets a ``TaskContext``, the
result must be JSON, and a raised exception becomes an ``ok=False`` outcome classified by the
fleet's tree (``error_type``, ``category``), the task's ``retry_on`` / ``fail_on`` first.
Nothing is retried, dead-lettered or stored.

``claim_lost_after_s`` plays a worker cut off from Redis: that many seconds into the execution
(0: from the start) the item's claim counts as lost, ``ctx.claim_lost`` turns True and the
fleet's own calls (``ctx.step``, ``ctx.check_claim()``, requests through ``ctx.http`` and
``ctx.anthropic``, ``run_agent``'s turns and tools) raise ``ClaimLost``: the outcome then has
``error_type == "ClaimLost"`` (``category == "claim_lost"``), where a worker would hand the item
back instead of ending it. A body that makes no fleet call after the loss ends as it would have.

``ctx.step`` and ``run_agent``'s checkpoints keep their memory in ``memory`` (a
``LocalMemory``, fresh unless given): pass the same one to a second ``run_task`` to see what a
retried item would do (stored steps return without running, an agent resumes).

``ctx.http`` and ``ctx.anthropic`` send every request through the fleet transport, so LLM
usage is read and priced (``llm.prices``), the task's budgets hold and a 429 raises
``RateLimited``; there is no cluster-wide limiter, circuit breaker or SSRF guard. ``http`` is
a handler (``request -> response``) or any httpx transport (``httpx.MockTransport``...);
without it, ``ctx.http`` refuses every request. ``anthropic`` is the base URL of a Messages
API, or an object with a ``url`` (the mock server); without it, ``ctx.anthropic`` raises.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import httpx

from agentfleet.config import Settings, get_settings
from agentfleet.errors import ConfigError, InvalidInput
from agentfleet.llm.vendors import vendors_for
from agentfleet.models import TaskOutcome
from agentfleet.protocol.task import FleetTask, validate_input
from agentfleet.runs.claims import Claim
from agentfleet.tasks.clients import accounting_hooks, rate_limit_raiser
from agentfleet.tasks.execution_state import ExecutionState, new_context
from agentfleet.tasks.failures import classify_failure
from agentfleet.tasks.item import jsonable
from agentfleet.tasks.memory import LocalMemory
from agentfleet.tools.transport import fleet_transport

__all__ = ["HasURL", "LocalMemory", "run_task"]

Handler = Callable[[httpx.Request], httpx.Response]


class HasURL(Protocol):
    @property
    def url(self) -> str: ...


def _refuse(request: httpx.Request) -> httpx.Response:
    raise ConfigError(f"{request.method} {request.url}: no HTTP in this test; pass http= to run_task")


def _http_factory(settings: Settings, http: Handler | httpx.BaseTransport | None) -> Any:
    inner = http if isinstance(http, httpx.BaseTransport) else httpx.MockTransport(http or _refuse)
    vendors = vendors_for(settings)

    def make(state: ExecutionState) -> httpx.Client:
        transport = fleet_transport(httpx, inner, accounting_hooks(state, settings, vendors))
        return httpx.Client(transport=transport, event_hooks={"response": [rate_limit_raiser(vendors)]})

    return make


def _anthropic_factory(settings: Settings, base_url: str | None) -> Any:
    def make(state: ExecutionState) -> Any:
        if base_url is None:
            raise ConfigError("ctx.anthropic needs a Messages API here: pass anthropic= to run_task")
        import anthropic
        import httpx2

        hooks = accounting_hooks(state, settings, vendors_for(settings))
        client = httpx2.Client(transport=fleet_transport(httpx2, httpx2.HTTPTransport(), hooks))
        return anthropic.Anthropic(api_key="test-key", base_url=base_url, max_retries=0, http_client=client)

    return make


def _claim(key: str, lost_after_s: float | None) -> dict[str, Any]:
    """The execution's claim token and its claim on ``key``: never renewed, so lost once
    ``lost_after_s`` seconds have passed, as a cut-off worker's is (None: no claim to lose)."""
    token = f"{key}:{time.monotonic_ns()}"
    if lost_after_s is None:
        return {"token": token, "claim": None}
    if not lost_after_s >= 0:
        raise ConfigError(f"claim_lost_after_s is {lost_after_s!r}: give seconds (0 or more), or None")
    return {"token": token, "claim": Claim(key, token, lost_after_s)}


def _budget_limits(task: FleetTask, settings: Settings) -> dict[str, Any]:
    """The task's own budget (``fleet_task(budget=...)``), each part the settings' cap when unset."""
    budget, caps = task.budget, settings.budgets
    return {
        "budget_usd": budget.usd if budget.usd is not None else caps.task_usd,
        "budget_tokens": budget.tokens if budget.tokens is not None else caps.task_tokens,
        "budget_turns": budget.turns if budget.turns is not None else caps.task_turns,
        "budget_wall_s": budget.wall_s if budget.wall_s is not None else caps.task_wall_s,
    }


def run_task(
    task: FleetTask,
    inputs: Mapping[str, Any] | None = None,
    *,
    http: Handler | httpx.BaseTransport | None = None,
    anthropic: str | HasURL | None = None,
    settings: Settings | None = None,
    attempt: int = 0,
    run_id: str = "test-run",
    item_key: str = "0",
    memory: LocalMemory | None = None,
    claim_lost_after_s: float | None = None,
) -> TaskOutcome:
    """Run ``task`` once on ``inputs`` here and now; its ``TaskOutcome`` (see the module docs).

    ``settings`` default to ``get_settings()`` (prices, budgets); ``attempt`` is what
    ``ctx.attempt`` says (0 for a first attempt); ``memory`` holds steps and checkpoints;
    ``claim_lost_after_s``: seconds into the execution at which its claim is lost (None: never).
    """
    settings = settings or get_settings()
    base_url = anthropic if isinstance(anthropic, str) or anthropic is None else anthropic.url
    if base_url is not None:
        settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"base_url": base_url})})
    task_id = f"{run_id}-{item_key}"
    ctx = new_context(
        task_id=task_id,
        run_id=run_id,
        item_key=item_key,
        idempotency_key=f"test:{task_id}",
        attempt=attempt,
        log=logging.LoggerAdapter(logging.getLogger(f"agentfleet.tasks.{task.name}"), {"task_id": task_id}),
        task_name=task.name,
        downstream=task.downstream,
        **_budget_limits(task, settings),
        memory=memory if memory is not None else LocalMemory(),
        workdir_root=settings.workdir_root,
        http_factory=_http_factory(settings, http),
        anthropic_factory=_anthropic_factory(settings, base_url),
        **_claim(f"test:{task_id}", claim_lost_after_s),
    )
    outcome = TaskOutcome(task_id=task_id, run_id=run_id, item_key=item_key, ok=True, attempts=1)
    started = time.monotonic()
    try:
        result = jsonable(task.fn(ctx, **validate_input(task, dict(inputs or {}))))
    except Exception as exc:
        err = exc if isinstance(exc, InvalidInput) else classify_failure(task, exc, settings)
        failed = {"ok": False, "error_type": type(err).__name__, "error": str(err), "category": err.category}
        outcome = outcome.model_copy(update=failed)
    else:
        outcome = outcome.model_copy(update={"result": result})
    finally:
        ctx.close()
    return outcome.model_copy(
        update={"duration_s": round(time.monotonic() - started, 6), "cost_usd": ctx.cost_usd}
    )
