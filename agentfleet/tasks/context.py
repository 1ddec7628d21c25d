"""``TaskContext``: what a fleet task's body receives as its first argument."""

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

if TYPE_CHECKING:
    import anthropic
    import httpx

__all__ = ["TaskContext"]


@dataclass
class TaskContext:
    """Ids, a scratch directory and clients for one execution of one item.

    ``workdir`` is a directory of this execution's own, removed when it ends. ``http`` and
    ``anthropic`` are built on first use and send every request through the fleet transport
    (limits, SSRF guard, credentials, accounting); they are closed when the execution ends.
    ``cost_usd`` (US dollars) and the token counts add up what this execution spent; the
    ``budget_*`` caps (dollars, tokens, seconds of wall clock) stop it with ``BudgetExceeded``
    at its next request once crossed.
    """

    task_id: str
    run_id: str
    item_key: str
    idempotency_key: str
    attempt: int
    log: logging.LoggerAdapter[logging.Logger]
    task_name: str = ""
    downstream: str | None = None
    index: int = 0
    cost_usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    downstreams_called: list[str] = field(default_factory=list)
    budget_usd: float | None = None
    budget_tokens: int | None = None
    budget_wall_s: float | None = None
    started_at: float = field(default_factory=time.monotonic)
    breaker: Any = field(default=None, repr=False)
    workdir_path: Path | None = field(default=None, repr=False)
    workdir_root: str | None = field(default=None, repr=False)
    _made_workdir: bool = field(default=False, repr=False)
    _http_factory: Callable[[TaskContext], httpx.Client] | None = field(default=None, repr=False)
    _anthropic_factory: Callable[[TaskContext], anthropic.Anthropic] | None = field(default=None, repr=False)
    _http: Any = field(default=None, repr=False)
    _anthropic: Any = field(default=None, repr=False)
    # Parallel tool calls may each call a model and report usage from their own thread.
    _usage_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def workdir(self) -> Path:
        """A scratch directory of this execution's own, made on first use (under
        ``workdir_root``) and removed when the execution ends."""
        if self.workdir_path is None:
            self.workdir_path = Path(tempfile.mkdtemp(prefix="af-", dir=self.workdir_root))
            self._made_workdir = True
        return self.workdir_path

    @property
    def http(self) -> httpx.Client:
        """An ``httpx.Client`` on the fleet transport."""
        if self._http is None:
            if self._http_factory is None:
                raise RuntimeError("this context has no HTTP client factory")
            self._http = self._http_factory(self)
        return self._http

    @property
    def anthropic(self) -> anthropic.Anthropic:
        """An ``anthropic.Anthropic`` with ``max_retries=0`` on the fleet transport."""
        if self._anthropic is None:
            if self._anthropic_factory is None:
                raise RuntimeError("this context has no Anthropic client factory")
            self._anthropic = self._anthropic_factory(self)
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

    @property
    def last_downstream(self) -> str | None:
        return self.downstreams_called[-1] if self.downstreams_called else self.downstream

    def close(self) -> None:
        """Close the clients this execution opened, and remove the scratch directory it made."""
        for client in (self._anthropic, self._http):
            if client is not None:
                try:
                    client.close()
                except Exception:  # closing must never mask the task's own outcome
                    self.log.debug("closing a client failed", exc_info=True)
        self._anthropic = self._http = None
        if self._made_workdir and self.workdir_path is not None:
            shutil.rmtree(self.workdir_path, ignore_errors=True)
            self.workdir_path, self._made_workdir = None, False
