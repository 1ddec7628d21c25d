"""The run store (``store.py``): key names (``keys.py``), starting and finishing deliveries
(``delivery.py``), fleet-wide counters (``tally.py``), run summaries (``summary.py``), item
claims (``claims.py``), items' durable memory (``memory.py``), budget accounting
(``budgets.py``), dependency-graph progress (``graph.py``) and compensation bookkeeping
(``undo.py``)."""

from agentfleet.runs.budgets import Alert, BudgetLedger, Caps, Report, Spend, SpendKeys, Standing
from agentfleet.runs.claims import Claim, ClaimRenewer, new_claim_token, take_lock
from agentfleet.runs.delivery import BeginState, FinishState
from agentfleet.runs.graph import Advance, GraphSpec, GraphState, StepSpec
from agentfleet.runs.keys import RunKeys, item_tag
from agentfleet.runs.memory import MemoryStore, Refused
from agentfleet.runs.store import RunStore
from agentfleet.runs.summary import CompletionStats, summary_from_record
from agentfleet.runs.tally import StatsTally, flush_tallies
from agentfleet.runs.undo import UndoEntry, UndoLog

__all__ = [
    "Advance",
    "Alert",
    "BeginState",
    "BudgetLedger",
    "Caps",
    "Claim",
    "ClaimRenewer",
    "CompletionStats",
    "FinishState",
    "GraphSpec",
    "GraphState",
    "MemoryStore",
    "Refused",
    "Report",
    "RunKeys",
    "RunStore",
    "Spend",
    "SpendKeys",
    "Standing",
    "StatsTally",
    "StepSpec",
    "UndoEntry",
    "UndoLog",
    "flush_tallies",
    "item_tag",
    "new_claim_token",
    "summary_from_record",
    "take_lock",
]
