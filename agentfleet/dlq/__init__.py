"""The dead-letter queue: entries, their Redis store, filters, stats and the digest.

Reading and removing entries needs only this package (``DLQStore``). Requeueing needs the run
store and the broker too, so the whole triage API, requeue included, is ``Fleet().dlq`` (a
``DeadLetterQueue``); the ``agentfleet dlq`` commands call it.
"""

from agentfleet.dlq.digest import Digest, WebhookResult, build_digest, post_webhook, slack_payload
from agentfleet.dlq.filters import DLQFilter, parse_since
from agentfleet.dlq.fingerprint import fingerprint, normalise_message
from agentfleet.dlq.model import AttemptRecord, DeadLetter, PreviousStage, dead_letter_id
from agentfleet.dlq.stats import DLQStats, FingerprintCount, VendorIssue, merge_vendor_issues
from agentfleet.dlq.store import NO_DOWNSTREAM, DLQStore

__all__ = [
    "NO_DOWNSTREAM",
    "AttemptRecord",
    "DLQFilter",
    "DLQStats",
    "DLQStore",
    "DeadLetter",
    "Digest",
    "FingerprintCount",
    "PreviousStage",
    "VendorIssue",
    "WebhookResult",
    "build_digest",
    "dead_letter_id",
    "fingerprint",
    "merge_vendor_issues",
    "normalise_message",
    "parse_since",
    "post_webhook",
    "slack_payload",
]
