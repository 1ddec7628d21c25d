"""The dead-letter queue: entries, their Redis store, filters, stats and the digest.

Reading and removing entries needs only this package (``DLQStore``). Requeueing needs the run
store and the broker too, so the whole triage API, requeue included, is ``Fleet().dlq`` (a
``DeadLetterQueue``); the ``agentfleet dlq`` commands call it. Every selecting call takes
the one filter vocabulary of ``DLQFilter``.
"""

from agentfleet.dlq.artifacts import Artifact as DeadLetterArtifact
from agentfleet.dlq.digest import Digest, WebhookResult, build_digest, post_webhook, slack_payload
from agentfleet.dlq.filters import DLQFilter, FilterFields, parse_since
from agentfleet.dlq.fingerprint import error_fingerprint, normalise_message
from agentfleet.dlq.model import AttemptRecord, DeadLetter, PreviousStage, dead_letter_id
from agentfleet.dlq.overview import CircuitSource, queue_stats
from agentfleet.dlq.stats import DLQStats, FingerprintCount, VendorIssue, merge_vendor_issues
from agentfleet.dlq.store import NO_DOWNSTREAM, DLQStore

__all__ = [
    "NO_DOWNSTREAM",
    "AttemptRecord",
    "CircuitSource",
    "DLQFilter",
    "DLQStats",
    "DLQStore",
    "DeadLetter",
    "DeadLetterArtifact",
    "Digest",
    "FilterFields",
    "FingerprintCount",
    "PreviousStage",
    "VendorIssue",
    "WebhookResult",
    "build_digest",
    "dead_letter_id",
    "error_fingerprint",
    "merge_vendor_issues",
    "normalise_message",
    "parse_since",
    "post_webhook",
    "queue_stats",
    "slack_payload",
]
