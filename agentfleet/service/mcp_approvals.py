"""The MCP server's approval tools: list what items wait for, and decide it.

- ``list_approvals(status, run_id, limit)``: approvals (pending by default), the oldest first;
- ``decide_approval(approval_id, approved, comment, data)``: approve (``data``: JSON handed to
  the item, edited tool arguments say) or reject; recorded as decided ``by`` ``mcp``. A
  second decision is refused with the decision that stands (who, what, when).

Both are held to the server's scope (``mcp_scope.py``): with ``--allow-task`` a client sees
and decides only the approvals of the allowed tasks, and any other is answered exactly as
one that does not exist. Ids are whole ids only, as for runs.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from agentfleet.approvals.filters import status_filter
from agentfleet.approvals.model import Approval
from agentfleet.errors import ApprovalAlreadyDecided, ApprovalExpired, ApprovalNotFound
from agentfleet.orchestration import Fleet
from agentfleet.service.mcp_scope import McpScope

__all__ = ["ApprovalTools", "register_approval_tools"]

MAX_LISTED = 500
# Who an MCP client's decision is recorded as.
MCP_DECIDER = "mcp"


class ApprovalTools:
    """The tools' bodies, on one ``Fleet`` and its scope: plain methods, testable without MCP."""

    def __init__(self, fleet: Fleet, scope: McpScope) -> None:
        self.fleet = fleet
        self.scope = scope
        self.redactor = fleet.settings.redactor()

    def _shown(self, approval: Approval) -> dict[str, Any]:
        shown: dict[str, Any] = self.redactor.value(approval.model_dump(mode="json"))
        return shown

    def _visible(self, approval_id: str) -> Approval:
        """The approval ``approval_id`` if the client may see it; else ``ApprovalNotFound``."""
        missing = ApprovalNotFound(f"no approval {approval_id}")
        if not approval_id.replace("_", "").isalnum():
            raise missing
        found = self.fleet.approval_store.get(approval_id)
        if not self.scope.task_allowed(found.task_name):
            raise missing
        return found

    def list(self, status: str = "pending", run_id: str | None = None, limit: int = 100) -> dict[str, Any]:
        found = self.fleet.approval_store.list(
            run_id or None, status_filter(status), max(1, min(limit, MAX_LISTED))
        )
        return {"approvals": [self._shown(a) for a in found if self.scope.task_allowed(a.task_name)]}

    def decide(
        self, approval_id: str, approved: bool, comment: str | None = None, data: Any = None
    ) -> dict[str, Any]:
        self._visible(approval_id)
        try:
            if approved:
                decided = self.fleet.approve(approval_id, by=MCP_DECIDER, comment=comment, data=data)
            else:
                decided = self.fleet.reject(approval_id, by=MCP_DECIDER, comment=comment)
        except (ApprovalAlreadyDecided, ApprovalExpired) as exc:
            return {"decided": False, "error": str(exc), "approval": self._shown(exc.approval)}
        return {"decided": True, "approval": self._shown(decided)}


def register_approval_tools(server: Any, tools: ApprovalTools, told: Any) -> None:
    """Add ``list_approvals`` and ``decide_approval`` to ``server``; ``told`` is the context
    manager that hands our errors to the client with their message."""

    @server.tool(
        description="Decisions items wait for (pending by default): what is asked, the run, the age."
    )
    def list_approvals(
        status: Annotated[
            str, Field(description="pending, approved, rejected, timed_out, cancelled or all")
        ] = "pending",
        run_id: Annotated[str | None, Field(description="Only this run's approvals")] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LISTED, description="Return at most this many")] = 100,
    ) -> dict[str, Any]:
        with told():
            return tools.list(status, run_id, limit)

    @server.tool(
        description=(
            "Approve or reject one approval; the waiting item resumes with the decision. "
            "A second decision is refused with the one that stands."
        )
    )
    def decide_approval(
        approval_id: Annotated[str, Field(description="The id list_approvals gave")],
        approved: Annotated[bool, Field(description="true to approve, false to reject")],
        comment: Annotated[str | None, Field(description="Why; kept with the decision")] = None,
        data: Annotated[Any, Field(description="JSON handed to the item with an approval")] = None,
    ) -> dict[str, Any]:
        with told():
            return tools.decide(approval_id, approved, comment, data)
