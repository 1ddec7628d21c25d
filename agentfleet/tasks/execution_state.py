"""What one execution of a task keeps behind its ``TaskContext``: clients, spending, budgets.

The task body sees only ``TaskContext`` (ids, ``workdir``, ``http``, ``anthropic``, ``log``,
what it spent). The fleet's own wiring lives here: the client factories, the circuit breaker
the transport asks, the budgets, the usage counters (shared by parallel tool calls, so behind
a lock) and the downstreams called. ``new_context`` builds both halves.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfleet.errors import BudgetExceeded
from agentfleet.tasks.context import TaskContext

if TYPE_CHECKING:
    import anthropic
    import httpx

__all__ = ["ExecutionState", "new_context"]

ClientFactory = Callable[["ExecutionState"], Any]


@dataclass
class ExecutionState:
    """One execution's internals. ``budget_*`` caps are US dollars, tokens (input plus output)
    and seconds of wall clock; ``breaker`` is what the fleet transport asks per request."""

    task_id: str
    run_id: str
    task_name: str = ""
    downstream: str | None = None
    index: int = 0
    budget_usd: float | None = None
    budget_tokens: int | None = None
    budget_wall_s: float | None = None
    breaker: Any = None
    workdir_root: str | None = None
    workdir_path: Path | None = None
    http_factory: ClientFactory | None = None
    anthropic_factory: ClientFactory | None = None
    started_at: float = field(default_factory=time.monotonic)
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    downstreams_called: list[str] = field(default_factory=list)
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
        """Add one call's spending (US dollars, tokens) to this execution's totals."""
        with self._usage_lock:
            self.cost_usd += cost_usd
            self.input_tokens += input_tokens
            self.output_tokens += output_tokens

    def check_budget(self) -> None:
        """Raise ``BudgetExceeded`` once this execution crossed its dollar, token or wall budget."""
        if self.budget_usd is not None and self.cost_usd >= self.budget_usd:
            raise BudgetExceeded(f"spent ${self.cost_usd:.4f} of a ${self.budget_usd:.4f} budget")
        tokens = self.input_tokens + self.output_tokens
        if self.budget_tokens is not None and tokens >= self.budget_tokens:
            raise BudgetExceeded(f"used {tokens} tokens of a {self.budget_tokens}-token budget")
        elapsed = time.monotonic() - self.started_at
        if self.budget_wall_s is not None and elapsed >= self.budget_wall_s:
            raise BudgetExceeded(f"ran {elapsed:.1f} s of a {self.budget_wall_s:.1f} s budget")

    def note_downstream(self, downstream: str) -> None:
        """Remember a downstream this execution called (the last one names a dead letter's)."""
        if not self.downstreams_called or self.downstreams_called[-1] != downstream:
            self.downstreams_called.append(downstream)

    def close(self, log: logging.LoggerAdapter[logging.Logger]) -> None:
        """Close the clients this execution opened, and remove the scratch directory it made."""
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
