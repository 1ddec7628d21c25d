"""The run store (``store.py``): starting and finishing deliveries (``delivery.py``),
fleet-wide counters (``tally.py``), run summaries (``summary.py``), item claims
(``claims.py``), items' durable memory (``memory.py``), budget accounting (``budgets.py``),
dependency-graph progress (``graph.py``), compensation bookkeeping (``undo.py``), each run's
timeline (``spans.py``) and the fleet's last two hours (``history.py``). Its key names are
built in ``agentfleet.keys``."""

from agentfleet.runs.budgets import Alert, BudgetLedger, Caps, Report, Spend, Standing
from agentfleet.runs.claims import Claim, ClaimRenewer, new_claim_token, take_lock
from agentfleet.runs.delivery import BeginState, FinishState
from agentfleet.runs.graph import Advance, GraphSpec, GraphState, StepSpec
from agentfleet.runs.history import FleetHistory, Minute
from agentfleet.runs.memory import MemoryStore, Refused
from agentfleet.runs.spans import AttemptSpan, Span, SpanLog
from agentfleet.runs.store import RunStore
from agentfleet.runs.summary import CompletionStats, summary_from_record
from agentfleet.runs.tally import StatsTally, flush_tallies
from agentfleet.runs.undo import UndoEntry, UndoLog

__all__ = [
    "Advance",
    "Alert",
    "AttemptSpan",
    "BeginState",
    "BudgetLedger",
    "Caps",
    "Claim",
    "ClaimRenewer",
    "CompletionStats",
    "FinishState",
    "FleetHistory",
    "GraphSpec",
    "GraphState",
    "MemoryStore",
    "Minute",
    "Refused",
    "Report",
    "RunStore",
    "Span",
    "SpanLog",
    "Spend",
    "Standing",
    "StatsTally",
    "StepSpec",
    "UndoEntry",
    "UndoLog",
    "flush_tallies",
    "new_claim_token",
    "summary_from_record",
    "take_lock",
]
