"""The webhook told when an approval is made: a Slack-shaped message with the signed link.

With ``approvals.webhook_url`` set, every new approval (not an event wait: a system, not a
person, completes those) is POSTed there as ``{"text": ..., "blocks": [...]}`` (a Slack
incoming webhook's shape; most chat tools accept it): what is asked, the task, run and item,
the redacted details, when it expires, and the signed link that decides it
(``agentfleet.approvals.links``), or the command that does when links are off.

It is sent from a thread of its own, so the item is parked at once whatever the webhook
does: at most ``approvals.webhook_attempts`` tries of ``approvals.webhook_timeout_s`` seconds
each. A failure is logged, never raised. The request goes through the SSRF guard
(``agentfleet.tools.guard``): a webhook on a private address needs
``fetch.allow_private_hosts``, as a task's request would.
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from typing import Any

import httpx

from agentfleet.approvals.links import link_for
from agentfleet.approvals.model import Approval
from agentfleet.config import Settings
from agentfleet.dlq.digest import WebhookResult, post_webhook
from agentfleet.tools.guard import httpx_guard

__all__ = ["approval_message", "notify_webhook", "post_approval"]

log = logging.getLogger("agentfleet.approvals")

# The most characters of an approval's details a message carries.
DETAILS_CHARS = 1500


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M UTC")


def approval_message(settings: Settings, approval: Approval) -> dict[str, Any]:
    """The Slack-shaped message announcing ``approval`` (``text``, plus ``blocks``)."""
    redactor = settings.redactor()
    details = json.dumps(redactor.value(approval.details), ensure_ascii=False, default=str)
    if len(details) > DETAILS_CHARS:
        details = details[:DETAILS_CHARS] + " ..."
    expiry = (
        f"Expires {_when(approval.expires_at)} (then {approval.on_timeout}ed by the timeout)."
        if approval.expires_at is not None
        else "It waits until someone decides."
    )
    link = link_for(settings, approval)
    decide = (
        f"<{link}|Approve or reject>"
        if link
        else f"Decide with `agentfleet approvals approve {approval.id}` (or reject), or in the console."
    )
    lines = [
        f"*agentfleet approval needed*: {redactor.text(approval.label)}",
        f"Task `{approval.task_name}`, run `{approval.run_id}`, item {approval.index}. {expiry}",
        f"Details: ```{details}```" if approval.details else "",
        decide,
    ]
    lines = [line for line in lines if line]
    return {
        "text": "\n".join(lines),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": line}} for line in lines],
    }


def post_approval(
    settings: Settings, approval: Approval, *, client: httpx.Client | None = None
) -> WebhookResult:
    """POST the message of ``approval`` to ``approvals.webhook_url`` now; never raises."""
    section = settings.approvals
    url = section.webhook_url
    if not url:
        return WebhookResult(ok=False, attempts=0, error="approvals.webhook_url is not set")
    own = client is None
    http = client or httpx.Client(
        transport=httpx_guard(settings=settings.fetch), timeout=section.webhook_timeout_s
    )
    try:
        result = post_webhook(
            url,
            approval_message(settings, approval),
            attempts=section.webhook_attempts,
            timeout_s=section.webhook_timeout_s,
            client=http,
        )
    except Exception as exc:  # a notification is advice: it never fails the item
        result = WebhookResult(ok=False, attempts=1, error=f"{type(exc).__name__}: {exc}")
    finally:
        if own:
            http.close()
    if not result.ok:
        log.error(
            "the approval webhook failed for %s after %d attempts: %s",
            approval.id,
            result.attempts,
            result.error,
        )
    return result


def notify_webhook(settings: Settings, approval: Approval) -> threading.Thread | None:
    """Send the webhook for a new ``approval`` from a thread of its own (None: nothing to send)."""
    if not settings.approvals.webhook_url or approval.kind != "approval":
        return None
    thread = threading.Thread(
        target=post_approval, args=(settings, approval), name=f"approval-webhook-{approval.id}", daemon=True
    )
    try:
        thread.start()
    except RuntimeError:  # no thread to spare: the approval stands, unannounced
        log.error("could not start the approval webhook for %s", approval.id, exc_info=True)
        return None
    return thread
