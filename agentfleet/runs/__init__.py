"""The run store (``store.py``): key names (``keys.py``), starting and finishing deliveries
(``delivery.py``), fleet-wide counters (``tally.py``), run summaries (``summary.py``) and item
claims (``claims.py``)."""

from agentfleet.runs.claims import ClaimRenewer, claim_renewer, new_claim_token
from agentfleet.runs.delivery import BeginState, FinishState
from agentfleet.runs.keys import RunKeys, item_tag
from agentfleet.runs.store import RunStore
from agentfleet.runs.summary import CompletionStats, summary_from_record
from agentfleet.runs.tally import StatsTally, flush_tallies

__all__ = [
    "BeginState",
    "ClaimRenewer",
    "CompletionStats",
    "FinishState",
    "RunKeys",
    "RunStore",
    "StatsTally",
    "claim_renewer",
    "flush_tallies",
    "item_tag",
    "new_claim_token",
    "summary_from_record",
]
