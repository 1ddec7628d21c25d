"""How an item shows in Celery's result backend and events, so Celery tooling tells the truth.

- An item that failed for good (dead-lettered) ends as Celery ``FAILURE`` with its fleet
  error (``AuthError``, ``BadRequest``...), after its outcome and dead letter are stored: a
  ``task-failed`` event, and Flower's Failed count equals the run's dead letters (a batch,
  one task for many items, is one failure however many of its items failed). The error
  is one the task declares it ``throws``, so the worker logs one line, not a traceback (the
  dead letter has the traceback). A pipeline stops at the failed stage, as Celery's chain
  does; fan-in is driven by the run store, so it still runs.
- A cancelled item is not a failure: it ends as ``SUCCESS`` with its ``ok=False`` outcome.
- A deferral (a rate limit, an open circuit, a busy claim, a full pool) is not a failure nor
  a retry: the same message is published again for later and the delivery ends without a
  state of its own (Celery's ``Ignore``); a ``task-deferred`` event says why and for how long.
  Retries after a failed attempt stay Celery retries (``RETRY``, ``task-retried``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from celery.exceptions import Ignore

from agentfleet import errors
from agentfleet.errors import AgentfleetError, Deferred

if TYPE_CHECKING:
    from celery.app.task import Context

    from agentfleet.protocol.task import FleetTask

__all__ = ["DEFERRED_EVENT", "defer", "final_error", "raise_for_failures"]

DEFERRED_EVENT = "task-deferred"
CANCELLED = "Cancelled"


def final_error(outcome: Mapping[str, Any]) -> AgentfleetError | None:
    """The error an item's final outcome (a ``TaskOutcome`` as a dict) ends its task with in
    Celery: its own fleet error class and message; None for a success or a cancellation."""
    if outcome.get("ok") or outcome.get("error_type") == CANCELLED:
        return None
    found = getattr(errors, str(outcome.get("error_type") or ""), None)
    cls = found if isinstance(found, type) and issubclass(found, AgentfleetError) else AgentfleetError
    if cls is Deferred:
        cls = AgentfleetError
    return cls(str(outcome.get("error") or "failed"))


def raise_for_failures(outcomes: Iterable[Mapping[str, Any]]) -> None:
    """Raise the error of the first outcome that failed for good (a batch's items may end in
    one task: it is ``FAILURE`` when any of them failed), once every outcome is stored."""
    failed = next((err for err in map(final_error, outcomes) if err is not None), None)
    if failed is not None:
        raise failed


def defer(
    task: FleetTask,
    request: Context,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    countdown_s: float,
    reason: str,
) -> NoReturn:
    """Publish the delivery's message again to run in ``countdown_s`` seconds, say so with a
    ``task-deferred`` event, and end this delivery without a state (``Ignore``)."""
    task.send_event(DEFERRED_EVENT, wait_s=round(countdown_s, 3), reason=reason[:200])
    task.signature_from_request(request, args=args, kwargs=kwargs, countdown=countdown_s).apply_async()
    raise Ignore()
