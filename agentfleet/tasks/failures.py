"""What happens when an item fails for good: it is logged, and becomes a dead letter."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from agentfleet.config import Settings
from agentfleet.errors import AgentfleetError
from agentfleet.tasks.meta import ItemMeta

if TYPE_CHECKING:
    from agentfleet.tasks.base import FleetTask

__all__ = ["on_final_failure"]

log = logging.getLogger("agentfleet.failures")


def on_final_failure(
    *,
    task: FleetTask,
    settings: Settings,
    meta: ItemMeta,
    task_id: str,
    inputs: dict[str, Any],
    error: AgentfleetError,
    traceback_text: str,
    attempt_errors: list[dict[str, Any]],
    downstream: str | None,
) -> bool:
    """Log the final failure as one structured line; True when it was dead-lettered."""
    log.error(
        json.dumps(
            {
                "event": "task_failed",
                "task": task.name,
                "task_id": task_id,
                "run_id": meta.run,
                "item_key": meta.item,
                "error_type": type(error).__name__,
                "category": error.category,
                "error": str(error)[:500],
                "attempts": len(attempt_errors),
                "downstream": downstream,
            }
        )
    )
    return False
