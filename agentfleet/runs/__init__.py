"""The run store (``store.py``), run summaries (``summary.py``), item claims (``claims.py``),
items' durable memory (``memory.py``), budget accounting (``budgets.py``), dependency-graph
progress (``graph.py``) and compensation bookkeeping (``undo.py``)."""

from agentfleet.runs.budgets import Alert, BudgetLedger, Caps, Report, Spend, SpendKeys, Standing
from agentfleet.runs.claims import ClaimRenewer, claim_renewer, new_claim_token
from agentfleet.runs.graph import Advance, GraphSpec, GraphState, StepSpec
from agentfleet.runs.memory import MemoryStore, Refused
from agentfleet.runs.store import BeginState, FinishState, RunStore
from agentfleet.runs.summary import CompletionStats, summary_from_record
from agentfleet.runs.undo import UndoEntry, UndoLog

__all__ = [
    "Advance",
    "Alert",
    "BeginState",
    "BudgetLedger",
    "Caps",
    "ClaimRenewer",
    "CompletionStats",
    "FinishState",
    "GraphSpec",
    "GraphState",
    "MemoryStore",
    "Refused",
    "Report",
    "RunStore",
    "Spend",
    "SpendKeys",
    "Standing",
    "StepSpec",
    "UndoEntry",
    "UndoLog",
    "claim_renewer",
    "new_claim_token",
    "summary_from_record",
]
