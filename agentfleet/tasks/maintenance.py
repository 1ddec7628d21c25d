"""Maintenance tasks (queue ``maintenance``): the dead-letter digest, run by celery beat, and
the budget alerts workers raise (``tasks/budgets.py``), posted to the same kind of webhook.

The digest reports what ``agentfleet dlq stats`` shows (``agentfleet.dlq.queue_stats``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx

from agentfleet.celery_app import app
from agentfleet.config import Settings, get_settings
from agentfleet.dlq import DLQStore, build_digest, post_webhook, queue_stats, slack_payload
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.redis_client import state_client
from agentfleet.redis_handles import StateRedis

__all__ = ["budget_alert", "budget_alert_payload", "dlq_digest", "run_digest"]

log = logging.getLogger("agentfleet.maintenance")


def run_digest(
    settings: Settings, *, client: StateRedis | None = None, http: httpx.Client | None = None
) -> dict[str, Any]:
    """Compute the digest, log it as one JSON line, and alert the webhook when over the threshold.

    Returns the digest as a dict plus ``posted`` (True once the webhook accepted it) and, when a
    POST failed, ``webhook_error``.
    """
    client = client or state_client(settings)
    stats = queue_stats(
        DLQStore.from_settings(settings, client), CircuitBreaker.from_settings(settings, client), settings.dlq
    )
    digest = build_digest(stats, threshold=settings.dlq.digest_threshold)
    record = digest.log_record()
    log.info(json.dumps(record))
    record["posted"] = False
    url = settings.dlq.webhook_url
    if digest.over_threshold and url:
        result = post_webhook(
            url,
            slack_payload(digest),
            attempts=settings.dlq.webhook_attempts,
            timeout_s=settings.dlq.webhook_timeout_s,
            client=http,
        )
        record["posted"] = result.ok
        if not result.ok:
            record["webhook_error"] = result.error
            log.error("the DLQ digest webhook failed after %d attempts: %s", result.attempts, result.error)
    return record


@app.task(name="agentfleet.maintenance.dlq_digest", acks_late=True)
def dlq_digest() -> dict[str, Any]:
    """The beat-scheduled digest. Never raises: a failing digest must not fill the worker's log
    with retries or poison the maintenance queue; the error is logged and returned.
    """
    try:
        return run_digest(get_settings())
    except Exception as exc:
        log.exception("the DLQ digest failed")
        return {"event": "dlq_digest", "error": f"{type(exc).__name__}: {exc}"}


def budget_alert_payload(alert: dict[str, Any]) -> dict[str, Any]:
    """A budget alert as a Slack incoming-webhook message (``text`` plus ``blocks``)."""
    whose = {"run": f"run {alert['name']}", "tenant": f"tenant {alert['name']}"}.get(
        alert["scope"], "the fleet"
    )
    period = " today (UTC)" if alert["scope"] in ("tenant", "fleet") else ""
    if alert["level"] == "hard":
        headline = f"*agentfleet budget reached*: {whose} spent ${alert['spent_usd']:.4f}{period}"
        detail = f"Its cap is ${alert['cap_usd']:.4f}; further model calls are refused."
    else:
        headline = f"*agentfleet budget alert*: {whose} spent ${alert['spent_usd']:.4f}{period}"
        detail = f"That is {alert['share']:.0%} of its ${alert['cap_usd']:.4f} cap."
    lines = [headline, detail]
    return {
        "text": "\n".join(lines),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": line}} for line in lines],
    }


@app.task(name="agentfleet.maintenance.budget_alert", acks_late=True)
def budget_alert(alert: dict[str, Any]) -> dict[str, Any]:
    """POST one budget alert to ``budgets.webhook_url`` (else ``dlq.webhook_url``). Never raises:
    a webhook that fails is logged, as the digest's is."""
    settings = get_settings()
    url = settings.budgets.webhook_url or settings.dlq.webhook_url
    if not url:
        return {"posted": False}
    result = post_webhook(
        url,
        budget_alert_payload(alert),
        attempts=settings.dlq.webhook_attempts,
        timeout_s=settings.dlq.webhook_timeout_s,
    )
    if not result.ok:
        log.error("the budget alert webhook failed after %d attempts: %s", result.attempts, result.error)
    return {"posted": result.ok}
