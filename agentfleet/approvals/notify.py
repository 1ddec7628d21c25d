"""What happens when a pause is made: the one place a notification hangs from.

Today: one log line (``agentfleet.approvals``, with the approval's id, run, item, what is
asked and its redacted details as ``extra`` fields, so the JSON log carries them) and a count
of pauses made in the fleet's counters (``p:stats`` field ``approvals_created``). The webhook
(``approvals.webhook_url``) needs the SSRF guard of ``tools/``, a layer this package may not
import: the delivery sends it beside this call (``tasks/approval_webhook.py``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from agentfleet.keys import RunKeys
from agentfleet.redis_client import state_client

if TYPE_CHECKING:
    from agentfleet.approvals.model import Approval
    from agentfleet.config import Settings

__all__ = ["CREATED_FIELD", "approval_created"]

log = logging.getLogger("agentfleet.approvals")
CREATED_FIELD = "approvals_created"


def approval_created(settings: Settings, approval: Approval, *, client: Any = None) -> None:
    """Say that ``approval`` was made: the log line and the counter (never raises: a pause
    stands whether or not anyone heard of it)."""
    log.info(
        "item %s of run %s waits for %s (%s)",
        approval.index,
        approval.run_id,
        approval.label,
        approval.id,
        extra={
            "approval_id": approval.id,
            "run_id": approval.run_id,
            "item_key": approval.item_key,
            "task_name": approval.task_name,
            "approval": approval.label,
            "details": approval.details,
            "expires_at": approval.expires_at,
        },
    )
    try:
        redis = client if client is not None else state_client(settings)
        redis.hincrby(RunKeys(settings.key_prefix).stats, CREATED_FIELD, 1)
    except Exception:  # the pause is recorded; a missed count must not undo it
        log.warning("could not count the approval %s", approval.id, exc_info=True)
