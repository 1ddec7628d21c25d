"""What an MCP client may read: runs of the tasks the server may start, and nothing else.

``agentfleet mcp --allow-task NAME`` limits what a client may start; the same list limits
what it may read. ``run_status`` and ``run_results`` answer for a run only when every task
the run names (each stage of a pipeline, each step of a graph) is allowed, and only for its
whole id (a prefix would let a client walk the ids of everyone's runs); any other run is
answered exactly as one that does not exist. ``dlq_stats`` counts only the dead letters of
allowed tasks. Without ``--allow-task`` every registered fleet task is allowed, and so is
every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentfleet.dlq import DLQFilter
from agentfleet.dlq.stats import stats_of_entries
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet

__all__ = ["MAX_SCANNED", "McpScope"]

# Dead letters read at most for one dlq_stats with an allowlist (the answer says when more).
MAX_SCANNED = 50_000


class McpScope:
    """The runs and dead letters a client of ``fleet`` restricted to ``allow_tasks`` sees."""

    def __init__(self, fleet: Fleet, allow_tasks: Sequence[str]) -> None:
        self.fleet = fleet
        self.allow_tasks = frozenset(allow_tasks)

    def task_allowed(self, task: str) -> bool:
        return not self.allow_tasks or task in self.allow_tasks

    def run_record(self, run_id: str) -> dict[str, str]:
        """The record of run ``run_id`` (its whole id), if the client may read it; else the
        same ``DispatchError`` as for a run that does not exist."""
        record: dict[str, str] = self.fleet.store.get_run(run_id) if run_id.isalnum() else {}
        tasks = [t for t in record.get("task", "").split(",") if t]
        if not record or not tasks or not all(self.task_allowed(t) for t in tasks):
            raise DispatchError(f"no run {run_id} (it may have expired)")
        return record

    def dlq_stats(self) -> dict[str, Any]:
        """The dead-letter queue's stats, of the allowed tasks' entries only."""
        if not self.allow_tasks:
            stats: dict[str, Any] = self.fleet.dlq.stats().model_dump(mode="json")
            return stats
        entries = []
        scanned = 0
        for entry in self.fleet.dlq.store.scan(DLQFilter()):
            scanned += 1
            if scanned > MAX_SCANNED:
                break
            if self.task_allowed(entry.task_name):
                entries.append(entry)
        window_s = self.fleet.settings.dlq.vendor_issue_window_s
        found: dict[str, Any] = stats_of_entries(entries, window_s=window_s).model_dump(mode="json")
        found["truncated"] = scanned > MAX_SCANNED
        return found
