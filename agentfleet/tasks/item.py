"""An item inside one delivery: its place in the run, its outcome."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from agentfleet.errors import PermanentError
from agentfleet.models import TaskOutcome
from agentfleet.protocol.meta import META_KWARG, ItemMeta

__all__ = ["cancelled_outcome", "jsonable", "meta_for", "outcome_for", "previous_stage"]


def meta_for(kwargs: dict[str, Any], task_id: str | None) -> ItemMeta:
    raw = kwargs.pop(META_KWARG, None)
    if raw:
        return ItemMeta.model_validate(raw)
    # Called directly (``task.delay(...)``), outside any run: the task id is the item.
    task_id = task_id or "local"
    return ItemMeta(run=f"direct-{task_id}", key=f"direct:{task_id}", item=task_id)


def previous_stage(args: tuple[Any, ...], meta: ItemMeta) -> TaskOutcome | None:
    if meta.stage == 0 or not args or not isinstance(args[0], dict):
        return None
    return TaskOutcome.model_validate(args[0])


def outcome_for(meta: ItemMeta, task_id: str, **fields: Any) -> TaskOutcome:
    return TaskOutcome(
        task_id=task_id,
        run_id=meta.run,
        item_key=meta.item,
        index=meta.idx,
        idempotency_key=meta.key,
        **fields,
    )


def cancelled_outcome(meta: ItemMeta, task_id: str) -> TaskOutcome:
    """The outcome of an item whose run was cancelled before it started."""
    return outcome_for(
        meta,
        task_id,
        ok=False,
        error_type="Cancelled",
        error="the run was cancelled before this item started",
    )


def jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise PermanentError(f"the task's result is not JSON: {exc}") from None
    return value
