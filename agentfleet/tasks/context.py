"""``TaskContext``: what a fleet task's body receives as its first argument.

Only the public surface lives on it; the fleet's wiring (client factories, circuit breaker,
budgets, usage counters) is its ``ExecutionState`` (``agentfleet.tasks.execution_state``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import anthropic
    import httpx

    from agentfleet.approvals import Decision, OnTimeout
    from agentfleet.tasks.execution_state import ExecutionState

__all__ = ["TaskContext"]


class TaskContext:
    """Ids, a scratch directory and clients for one execution of one item.

    ``workdir`` is a directory of this execution's own, removed when it ends. ``http`` and
    ``anthropic`` are built on first use and send every request through the fleet transport
    (limits, SSRF guard, credentials, accounting); they are closed when the execution ends.
    ``cost_usd`` (US dollars) and the token counts add up what this execution spent so far;
    once a budget of the task is crossed, ``check_budget()`` (and the next request) raises
    ``BudgetExceeded``. ``step(name, fn, ...)`` runs ``fn`` once per item, whatever retries,
    redeliveries and requeues follow.

    ``claim_lost`` turns True once this execution no longer holds its item's claim (its worker
    was cut off from Redis, or frozen, for longer than ``delivery.claim_ttl_s``, and another
    delivery may be running the item); from then on ``check_claim()``, ``step``, every request
    through ``http`` and ``anthropic``, and the agent loop's tool calls and checkpoints raise
    ``ClaimLost``, so the body stops at its next fleet call.
    """

    __slots__ = ("_execution", "attempt", "idempotency_key", "item_key", "log", "run_id", "task_id")

    def __init__(
        self,
        *,
        task_id: str,
        run_id: str,
        item_key: str,
        idempotency_key: str,
        attempt: int,
        log: logging.LoggerAdapter[logging.Logger],
        execution: ExecutionState,
    ) -> None:
        self.task_id = task_id
        self.run_id = run_id
        self.item_key = item_key
        self.idempotency_key = idempotency_key
        self.attempt = attempt
        self.log = log
        self._execution = execution

    def __repr__(self) -> str:
        return f"TaskContext(task_id={self.task_id!r}, run_id={self.run_id!r}, item_key={self.item_key!r})"

    @property
    def workdir(self) -> Path:
        """A scratch directory of this execution's own, made on first use and removed at the end."""
        return self._execution.workdir()

    @property
    def http(self) -> httpx.Client:
        """An ``httpx.Client`` on the fleet transport."""
        return self._execution.http()

    @property
    def anthropic(self) -> anthropic.Anthropic:
        """An ``anthropic.Anthropic`` with ``max_retries=0`` on the fleet transport."""
        return self._execution.anthropic()

    @property
    def cost_usd(self) -> float:
        """US dollars this execution's LLM calls cost so far."""
        return self._execution.cost_usd

    @property
    def input_tokens(self) -> int:
        return self._execution.input_tokens

    @property
    def output_tokens(self) -> int:
        return self._execution.output_tokens

    @property
    def downstreams_called(self) -> tuple[str, ...]:
        """The downstreams this execution called, in order (repeats in a row once)."""
        return tuple(self._execution.downstreams_called)

    @property
    def last_downstream(self) -> str | None:
        """The downstream called last, else the task's declared one."""
        called = self._execution.downstreams_called
        return called[-1] if called else self._execution.downstream

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this item and return its result.

        The result (JSON) is stored under the item's idempotency key, the step's ``name`` and
        how many calls of that name this execution made before; a later execution of the item
        (a retry, a redelivery after a crash, a requeue) that reaches the same call gets it
        back without calling ``fn``. It comes back as JSON gives it (a tuple as a list), on the
        first execution too. A step that raises stores nothing. Steps expire with the item's
        outcome (``result_ttl_s``). Give steps that run in parallel threads names of their own.
        """
        return self._execution.step(name, fn, args, kwargs)

    def approval(
        self,
        name: str,
        details: dict[str, Any] | None = None,
        timeout_s: float | None = None,
        on_timeout: OnTimeout = "reject",
    ) -> Decision:
        """Wait for a person to approve or reject ``name``, holding no worker slot, and return
        their ``Decision`` (``approved``, ``by``, ``comment``, ``data``, ``timed_out``).

        The first time the item gets here, a pending approval is recorded (with this item, its
        run, ``name`` and ``details``, redacted) and the item is parked: the body stops here,
        its message is acknowledged and kept, its slot goes to other work. A decision
        (``Fleet.approve`` / ``reject``, the CLI, the service) sends the item again: the body
        runs from the top, its ``step`` calls and agent checkpoints return what they stored,
        and this call returns the decision. So put what must not run twice before it in a
        ``step``. The ``n``-th call of one ``name`` in a body is the same approval on every
        run of the item. After ``timeout_s`` seconds (None: never) the timeout decides:
        ``on_timeout`` ``"reject"`` (the default) or ``"approve"``, with ``timed_out`` True.
        """
        return self._execution.pause("approval", name, details, timeout_s, on_timeout)

    def wait_for_event(self, key: str, timeout_s: float | None = None) -> Decision:
        """Wait for event ``key`` (``Fleet.send_event(key, data)``: a CI result, another
        system's webhook) as ``approval`` waits for a person, holding no slot. The event's
        ``data`` comes back in the ``Decision`` (``approved`` True); after ``timeout_s``
        seconds it returns ``approved`` False with ``timed_out`` True. Only waits pending when
        the event comes are completed: an event nobody waits for is not kept."""
        return self._execution.pause("event", key, None, timeout_s, "reject")

    def check_budget(self) -> None:
        """Raise ``BudgetExceeded`` once this execution crossed its dollar, token or wall budget."""
        self._execution.check_budget()

    @property
    def claim_lost(self) -> bool:
        """True once this execution no longer holds its item's claim: a renewal found it gone,
        or none reached Redis for ``delivery.claim_ttl_s`` seconds. It never turns back."""
        claim = self._execution.claim
        return claim is not None and claim.lost

    def check_claim(self) -> None:
        """Raise ``ClaimLost`` once ``claim_lost`` is True: call it between long stretches of
        work that make no fleet call (the fleet's own calls ask it themselves)."""
        self._execution.check_claim()

    def close(self) -> None:
        """Close the clients this execution opened, and remove the scratch directory it made."""
        self._execution.close(self.log)
