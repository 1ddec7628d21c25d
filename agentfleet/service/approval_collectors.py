"""Metrics of the pauses (approvals and event waits), read from what the store keeps in Redis.

- ``agentfleet_approvals_pending``: pauses waiting now (for a person or an event): one
  ``ZCARD``, so a dashboard can alert on approvals left waiting;
- ``agentfleet_approvals_created_total``: pauses made since the first run;
- ``agentfleet_approval_decisions_total{decision}``: pauses decided since the first run, by
  ``approved``, ``rejected``, ``timed_out`` (the timeout decided) and ``cancelled`` (with
  their run).
"""

from __future__ import annotations

from agentfleet.approvals.notify import CREATED_FIELD
from agentfleet.keys import ApprovalKeys, RunKeys
from agentfleet.service.samples import Sample, Sources

__all__ = ["DECISIONS", "collect_approvals"]

DECISIONS = ("approved", "rejected", "timed_out", "cancelled")


def collect_approvals(sources: Sources) -> list[Sample]:
    """The pending pauses now, and the counts of pauses made and decided."""
    prefix = sources.settings.key_prefix
    client = sources.store.client
    keys = ApprovalKeys(prefix)
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.pending)
    pipe.hget(RunKeys(prefix).stats, CREATED_FIELD)
    pipe.hmget(keys.counts, list(DECISIONS))
    pending, created, counts = pipe.execute()
    samples = [
        Sample(
            "agentfleet_approvals_pending",
            int(pending),
            help="Items parked now, waiting for a person's decision or an event.",
        ),
        Sample(
            "agentfleet_approvals_created_total",
            int(created or 0),
            kind="counter",
            help="Pauses (approvals and event waits) made since the first run.",
        ),
    ]
    samples += [
        Sample(
            "agentfleet_approval_decisions_total",
            int(n or 0),
            {"decision": decision},
            kind="counter",
            help="Pauses decided since the first run: approved, rejected, timed out or cancelled.",
        )
        for decision, n in zip(DECISIONS, counts, strict=True)
    ]
    return samples
