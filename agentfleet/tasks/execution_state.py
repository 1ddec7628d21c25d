"""What one execution of a task keeps behind its ``TaskContext``: clients, spending, budgets.

The task body sees only ``TaskContext`` (ids, ``workdir``, ``http``, ``anthropic``, ``log``,
what it spent, ``step``, whether it still holds its claim). The fleet's own wiring lives here:
the client factories, the circuit breaker the transport asks, the budgets, the usage counters
(shared by parallel tool calls, so behind a lock), the downstreams called, the item's memory
(steps and agent checkpoints, kept across executions of the item when it is a
``StoredMemory``) and the delivery's claim. ``new_context`` builds both halves.

``gate()`` is what every one of the fleet's own calls asks first (a request through the fleet
transport, a step, a tool call): the claim must still be held (else ``ClaimLost``), and no
budget crossed (else ``BudgetExceeded``).

Budgets count over every attempt of the item: ``prior`` is what earlier attempts spent (read
from the item's memory when the delivery starts), and ``reporter`` (set up with the clients,
see ``tasks/budgets.py``) records each call's spending as it happens, so an attempt killed
mid-way has already counted what it spent.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfleet.errors import BudgetExceeded
from agentfleet.runs import Claim, Spend
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.memory import LocalMemory, Memory, run_step, step_field

if TYPE_CHECKING:
    import anthropic
    import httpx

    from agentfleet.approvals import ApprovalKind, Decision, OnTimeout

__all__ = ["ExecutionState", "call_context", "execution_of", "new_context"]

ClientFactory = Callable[["ExecutionState"], Any]


@dataclass
class ExecutionState:
    """One execution's internals. ``budget_*`` caps are US dollars, tokens (input plus output),
    model calls and seconds of wall clock, over every attempt of the item; ``breaker`` is what
    the fleet transport asks per request. ``key`` is the item's idempotency key (of its
    stage or graph step), ``token`` this delivery's claim token and ``claim`` what this
    process knows of that claim (None: an execution outside a delivery, which holds none),
    ``tenant`` its run's tenant label."""

    task_id: str
    run_id: str
    task_name: str = ""
    downstream: str | None = None
    index: int = 0
    key: str = ""
    tenant: str | None = None
    budget_usd: float | None = None
    budget_tokens: int | None = None
    budget_turns: int | None = None
    budget_wall_s: float | None = None
    prior: Spend = field(default_factory=Spend)
    memory: Memory = field(default_factory=LocalMemory)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    claim: Claim | None = None
    reporter: Any = None
    # The pauses' store (``approvals.ApprovalStore``): None outside a delivery.
    approvals: Any = None
    breaker: Any = None
    workdir_root: str | None = None
    workdir_path: Path | None = None
    http_factory: ClientFactory | None = None
    anthropic_factory: ClientFactory | None = None
    started_at: float = field(default_factory=time.monotonic)
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    turns: int = 0
    downstreams_called: list[str] = field(default_factory=list)
    _calls: dict[str, int] = field(default_factory=dict)
    _made_workdir: bool = False
    _http: Any = None
    _anthropic: Any = None
    # Parallel tool calls may each call a model and report usage from their own thread.
    _usage_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def workdir(self) -> Path:
        if self.workdir_path is None:
            self.workdir_path = Path(tempfile.mkdtemp(prefix="af-", dir=self.workdir_root))
            self._made_workdir = True
        return self.workdir_path

    def http(self) -> httpx.Client:
        if self._http is None:
            if self.http_factory is None:
                raise RuntimeError("this context has no HTTP client factory")
            self._http = self.http_factory(self)
        return self._http

    def anthropic(self) -> anthropic.Anthropic:
        if self._anthropic is None:
            if self.anthropic_factory is None:
                raise RuntimeError("this context has no Anthropic client factory")
            self._anthropic = self.anthropic_factory(self)
        return self._anthropic

    def add_usage(self, *, cost_usd: float = 0.0, input_tokens: int = 0, output_tokens: int = 0) -> None:
        """Add one model call's spending (US dollars, tokens) to this execution's totals."""
        with self._usage_lock:
            self.cost_usd += cost_usd
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens
            self.turns += 1

    def elapsed_s(self) -> float:
        """Seconds this execution has run."""
        return time.monotonic() - self.started_at

    def check_budget(self) -> None:
        """Raise ``BudgetExceeded`` once the item crossed its dollar, token, turn or wall
        budget, counting what its earlier attempts spent (``prior``)."""
        prior = self.prior
        earlier = " over every attempt" if prior != Spend() else ""
        cost = prior.usd + self.cost_usd
        if self.budget_usd is not None and cost >= self.budget_usd:
            raise BudgetExceeded(f"spent ${cost:.4f} of a ${self.budget_usd:.4f} budget{earlier}")
        tokens = prior.tokens + self.input_tokens + self.output_tokens
        if self.budget_tokens is not None and tokens >= self.budget_tokens:
            raise BudgetExceeded(f"used {tokens} tokens of a {self.budget_tokens}-token budget{earlier}")
        turns = prior.turns + self.turns
        if self.budget_turns is not None and turns >= self.budget_turns:
            raise BudgetExceeded(f"made {turns} model calls of a {self.budget_turns}-call budget{earlier}")
        elapsed = prior.seconds + self.elapsed_s()
        if self.budget_wall_s is not None and elapsed >= self.budget_wall_s:
            raise BudgetExceeded(f"ran {elapsed:.1f} s of a {self.budget_wall_s:.1f} s budget{earlier}")

    def check_claim(self) -> None:
        """Raise ``ClaimLost`` once this execution's claim is gone, or may be (see ``Claim``)."""
        if self.claim is not None:
            self.claim.check()

    def gate(self) -> None:
        """What each of the fleet's own calls asks first: ``check_claim``, then ``check_budget``."""
        self.check_claim()
        self.check_budget()

    def next_call(self, name: str) -> int:
        """How many calls of ``name`` (a step, or ``agent`` for ``run_agent``) this execution
        made before this one: with the name, it identifies the call across executions."""
        with self._usage_lock:
            count = self._calls.get(name, 0)
            self._calls[name] = count + 1
            return count

    def step(self, name: str, fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """``TaskContext.step``: see ``agentfleet.tasks.memory.run_step``."""
        self.check_claim()
        return run_step(self.memory, step_field(name, self.next_call(f"s:{name}")), fn, args, kwargs)

    def pause(
        self,
        kind: ApprovalKind,
        name: str,
        details: dict[str, Any] | None,
        timeout_s: float | None,
        on_timeout: OnTimeout,
    ) -> Decision:
        """``TaskContext.approval`` and ``wait_for_event``: see ``agentfleet.tasks.pauses``."""
        from agentfleet.tasks.pauses import pause

        return pause(self, kind, name, details, timeout_s, on_timeout)

    def note_downstream(self, downstream: str) -> None:
        """Remember a downstream this execution called (the last one names a dead letter's)."""
        if not self.downstreams_called or self.downstreams_called[-1] != downstream:
            self.downstreams_called.append(downstream)

    def close(self, log: logging.LoggerAdapter[logging.Logger]) -> None:
        """Count the seconds not yet reported against the item's budget, close the clients
        this execution opened, and remove the scratch directory it made."""
        if self.reporter is not None:
            try:
                self.reporter.report_seconds(self.elapsed_s())
            except Exception:  # the outcome matters more than the last seconds of accounting
                log.warning("could not record this execution's seconds", exc_info=True)
        for client in (self._anthropic, self._http):
            if client is not None:
                try:
                    client.close()
                except Exception:  # closing must never mask the task's own outcome
                    log.debug("closing a client failed", exc_info=True)
        self._anthropic = self._http = None
        if self._made_workdir and self.workdir_path is not None:
            shutil.rmtree(self.workdir_path, ignore_errors=True)
            self.workdir_path, self._made_workdir = None, False


def new_context(
    *,
    task_id: str,
    run_id: str,
    item_key: str,
    idempotency_key: str,
    attempt: int,
    log: logging.LoggerAdapter[logging.Logger],
    **state: Any,
) -> TaskContext:
    """A ``TaskContext`` over a new ``ExecutionState`` (``state``: its fields, by name)."""
    state.setdefault("key", idempotency_key)
    execution = ExecutionState(task_id=task_id, run_id=run_id, **state)
    return TaskContext(
        task_id=task_id,
        run_id=run_id,
        item_key=item_key,
        idempotency_key=idempotency_key,
        attempt=attempt,
        log=log,
        execution=execution,
    )


def execution_of(ctx: TaskContext) -> ExecutionState:
    """The fleet's side of ``ctx`` (for the fleet's own code, such as the agent loop)."""
    return ctx._execution


def call_context(ctx: TaskContext, call_id: str) -> TaskContext:
    """``ctx`` for one call inside the item (a tool call): its ``idempotency_key`` names the
    call, ``{item key}:{call_id}``, so the same call repeated after a resume has the same key."""
    return TaskContext(
        task_id=ctx.task_id,
        run_id=ctx.run_id,
        item_key=ctx.item_key,
        idempotency_key=f"{ctx.idempotency_key}:{call_id}",
        attempt=ctx.attempt,
        log=ctx.log,
        execution=ctx._execution,
    )
