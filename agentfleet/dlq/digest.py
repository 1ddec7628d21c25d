"""The daily digest: the queue's depth and breakdown, one log line, and a webhook alert.

The alert is the JSON a Slack incoming webhook accepts (``text`` plus ``blocks``); other chat
tools that take Slack-shaped webhooks read the ``text``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, Field

from agentfleet.dlq.stats import DLQStats, FingerprintCount, VendorIssue, format_age
from agentfleet.errors import RetryableError, error_for_status

__all__ = ["Digest", "WebhookResult", "build_digest", "post_webhook", "slack_payload"]

log = logging.getLogger("agentfleet.dlq.digest")

MAX_WAIT_S = 30.0


class Digest(BaseModel):
    """The queue at one moment, and whether its depth is over the alert ``threshold``."""

    depth: int
    threshold: int
    over_threshold: bool
    by_category: dict[str, int] = Field(default_factory=dict)
    by_downstream: dict[str, int] = Field(default_factory=dict)
    top_fingerprints: list[FingerprintCount] = Field(default_factory=list)
    oldest_age_s: float | None = None
    vendor_issues: list[VendorIssue] = Field(default_factory=list)
    generated_at: float = Field(default_factory=time.time)

    def log_record(self) -> dict[str, Any]:
        """The digest as one structured log record (``event: dlq_digest``)."""
        return {"event": "dlq_digest", **self.model_dump(mode="json")}


def build_digest(stats: DLQStats, *, threshold: int) -> Digest:
    """A digest of ``stats``: over the threshold when the depth is strictly greater."""
    return Digest(
        depth=stats.depth,
        threshold=threshold,
        over_threshold=stats.depth > threshold,
        by_category=stats.by_category,
        by_downstream=stats.by_downstream,
        top_fingerprints=stats.top_fingerprints[:5],
        oldest_age_s=stats.oldest_age_s,
        vendor_issues=stats.vendor_issues,
        generated_at=stats.generated_at,
    )


def slack_payload(digest: Digest, *, title: str = "agentfleet dead-letter queue") -> dict[str, Any]:
    """A Slack incoming-webhook message: a ``text`` summary and ``blocks`` with the breakdown."""
    categories = ", ".join(f"{name} {count}" for name, count in digest.by_category.items()) or "none"
    summary = (
        f"*{title}*: {digest.depth} dead letters (alert threshold {digest.threshold}); "
        f"oldest {format_age(digest.oldest_age_s)}. By category: {categories}."
    )
    lines = [summary]
    if digest.vendor_issues:
        issues = "; ".join(
            f"{i.downstream} ({i.failures} failed attempts, {i.dead_letters} dead letters"
            + (f", circuit {i.circuit}" if i.circuit else "")
            + ")"
            for i in digest.vendor_issues
        )
        lines.append(f"Vendor issues: {issues}.")
    if digest.top_fingerprints:
        lines.append(
            "Top failures:\n"
            + "\n".join(
                f"• {fp.count}x {fp.error_type}: {fp.message[:120]}" for fp in digest.top_fingerprints
            )
        )
    lines.append("Triage with `agentfleet dlq list`, `agentfleet dlq show ID`, `agentfleet dlq requeue`.")
    return {
        "text": "\n".join(lines),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": line}} for line in lines],
    }


@dataclass(frozen=True)
class WebhookResult:
    """How a webhook POST went: ``ok``, the attempts made, the last status and error."""

    ok: bool
    attempts: int
    status_code: int | None = None
    error: str | None = None


def post_webhook(
    url: str,
    payload: dict[str, Any],
    *,
    attempts: int = 3,
    timeout_s: float = 10.0,
    backoff_s: float = 1.0,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> WebhookResult:
    """POST ``payload`` as JSON, trying up to ``attempts`` times; never raises.

    Connection errors, timeouts, 408/409/429 and 5xx are tried again after ``backoff_s``
    seconds doubled per attempt (or the server's ``retry-after``, at most 30 s); any other
    4xx is given up on at once.
    """
    own = client is None
    http = client or httpx.Client(timeout=timeout_s)
    last = WebhookResult(ok=False, attempts=0, error="not sent")
    try:
        for attempt in range(1, attempts + 1):
            wait = backoff_s * 2 ** (attempt - 1)
            try:
                response = http.post(
                    url, content=json.dumps(payload), headers={"content-type": "application/json"}
                )
            except httpx.HTTPError as exc:
                last = WebhookResult(ok=False, attempts=attempt, error=f"{type(exc).__name__}: {exc}")
            else:
                err = error_for_status(
                    response.status_code, headers=dict(response.headers), body=response.text
                )
                if err is None:
                    return WebhookResult(ok=True, attempts=attempt, status_code=response.status_code)
                last = WebhookResult(
                    ok=False, attempts=attempt, status_code=response.status_code, error=str(err)
                )
                if not isinstance(err, RetryableError):
                    break
                if err.retry_after_s is not None:
                    wait = err.retry_after_s
            log.warning("webhook POST attempt %d/%d failed: %s", attempt, attempts, last.error)
            if attempt < attempts:
                sleep(min(wait, MAX_WAIT_S))
    finally:
        if own:
            http.close()
    return last
