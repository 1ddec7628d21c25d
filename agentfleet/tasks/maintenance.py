"""Maintenance tasks (queue ``maintenance``): the dead-letter digest, run by celery beat.

The digest reports what ``agentfleet dlq stats`` shows (``agentfleet.dlq.queue_stats``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import redis

from agentfleet.celery_app import app
from agentfleet.config import Settings, get_settings
from agentfleet.dlq import DLQStore, build_digest, post_webhook, queue_stats, slack_payload
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.redis_client import connect

__all__ = ["dlq_digest", "run_digest"]

log = logging.getLogger("agentfleet.maintenance")


def run_digest(
    settings: Settings, *, client: redis.Redis | None = None, http: httpx.Client | None = None
) -> dict[str, Any]:
    """Compute the digest, log it as one JSON line, and alert the webhook when over the threshold.

    Returns the digest as a dict plus ``posted`` (True once the webhook accepted it) and, when a
    POST failed, ``webhook_error``.
    """
    client = client or connect(settings.redis_target())
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
