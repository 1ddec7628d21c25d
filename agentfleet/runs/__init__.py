"""The run store (``store.py``), run summaries (``summary.py``) and item claims (``claims.py``)."""

from agentfleet.runs.claims import ClaimRenewer, claim_renewer, new_claim_token
from agentfleet.runs.store import BeginState, FinishState, RunStore
from agentfleet.runs.summary import CompletionStats, summary_from_record

__all__ = [
    "BeginState",
    "ClaimRenewer",
    "CompletionStats",
    "FinishState",
    "RunStore",
    "claim_renewer",
    "new_claim_token",
    "summary_from_record",
]
