"""What a fleet task's request reads of Celery's request and worker state.

Celery's ``Request`` keeps the task's context (what ``task.request`` is inside the task) in a
private property, and ``celery.worker.state.task_ready`` is how a request leaves the worker's
count of active requests. ``FleetRequest`` (``tasks/request.py``) needs both when it finishes
an item after its hard time limit; they are here, checked with the feature
``finishing_request`` (``internals``). ``request_class`` names the request class a fleet task
uses: Celery's own when that feature is off.
"""

from __future__ import annotations

from typing import Any

from celery.worker import state

from agentfleet.transport.internals import enabled

__all__ = ["context_of", "leave_active", "request_class"]

_FLEET_REQUEST = "agentfleet.tasks.request:FleetRequest"
_CELERY_REQUEST = "celery.worker.request:Request"


def context_of(request: Any) -> Any:
    """The task context of Celery request ``request`` (its ``task.request`` when running)."""
    return request._context


def leave_active(request: Any) -> None:
    """Take ``request`` out of the worker's active requests, as Celery does when one ends."""
    state.task_ready(request)


def request_class() -> str:
    """The request class of fleet tasks: ``FleetRequest``, or Celery's own when what it needs of
    Celery does not hold (hard time limits then end as Celery's failures, and the reconciler
    sends the item again)."""
    return _FLEET_REQUEST if enabled("finishing_request") else _CELERY_REQUEST
