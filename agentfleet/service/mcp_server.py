"""``agentfleet mcp``: the fleet as tools for any MCP client (the official ``mcp`` SDK).

Tools:

- ``fan_out_tasks(task, inputs, name, max_in_flight, budget_usd, aggregate)``: start a run of a
  registered fleet task over a list of keyword-input objects; returns the run id at once.
  ``max_in_flight`` caps the run's items executing at once across the cluster;
  ``budget_usd`` stops the run's items once the run has spent that many US dollars (recorded
  with the run, before any item is sent): a finite amount, at most ``service.max_run_usd``
  (default ``budgets.run_usd``); ``aggregate`` is one of the operator's aggregates
  (``agentfleet/callables.py``), refused before anything is imported or started;
- ``run_status(run_id)``: the run's summary and its spend by downstream;
- ``run_results(run_id, failed_only, offset, limit)``: the outcomes (results and errors,
  secrets redacted) and the aggregate;
- ``dlq_stats()``: the dead-letter queue's depth, breakdowns, top fingerprints, vendor issues.

Over stdio the client starts the server and owns it; over streamable HTTP every request must
carry ``Authorization: Bearer <service.token>``, and failed checks are throttled per address
(``service/guard.py``). ``allow_tasks`` (when given) limits which tasks a client may start,
and which runs and dead letters it may read (``mcp_scope.py``).
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import Iterator, Sequence
from typing import Annotated, Any

from pydantic import Field

from agentfleet.access import AuthThrottle
from agentfleet.callables import outside_aggregate
from agentfleet.config import Settings
from agentfleet.errors import AgentfleetError, DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.options import run_budget
from agentfleet.service.guard import AuthGuard
from agentfleet.service.mcp_scope import McpScope
from agentfleet.spend import SpendLedger

__all__ = ["MCP_PATH", "FleetTools", "build_server", "http_app"]

MCP_PATH = "/mcp"
# The most outcomes one run_results call returns.
MAX_RESULTS = 500
# The largest max_in_flight a client may ask for.
MAX_IN_FLIGHT = 100_000


class FleetTools:
    """The tools' bodies, on one ``Fleet``: plain methods, testable without MCP."""

    def __init__(self, fleet: Fleet, *, allow_tasks: Sequence[str] = ()) -> None:
        self.fleet = fleet
        self.settings: Settings = fleet.settings
        self.allow_tasks = tuple(allow_tasks)
        self.scope = McpScope(fleet, allow_tasks)
        self.ledger = SpendLedger.from_settings(fleet.settings, fleet.store.client)
        self.redactor = fleet.settings.redactor()

    def _budget(self, budget_usd: float | None) -> float | None:
        """A caller's ``budget_usd``: finite, above 0, and within the operator's cap."""
        run_budget(budget_usd)
        cap = self.settings.service.max_run_usd or self.settings.budgets.run_usd
        if budget_usd is not None and cap is not None and budget_usd > cap:
            raise DispatchError(
                f"budget_usd {budget_usd:g} is more than this server allows: at most {cap:g} US dollars "
                "(service.max_run_usd, else budgets.run_usd)"
            )
        return budget_usd

    def fan_out(
        self,
        task: str,
        inputs: list[dict[str, Any]],
        name: str | None = None,
        max_in_flight: int | None = None,
        budget_usd: float | None = None,
        aggregate: str | None = None,
    ) -> dict[str, Any]:
        if not self.scope.task_allowed(task):
            raise DispatchError(f"task {task!r} is not allowed here; allowed: {', '.join(self.allow_tasks)}")
        cap = self.settings.service.max_inputs
        if len(inputs) > cap:
            raise DispatchError(f"{len(inputs)} inputs is more than service.max_inputs ({cap})")
        if max_in_flight is not None and not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise DispatchError(f"max_in_flight must be from 1 to {MAX_IN_FLIGHT}, not {max_in_flight}")
        self._budget(budget_usd)
        fn = outside_aggregate(self.settings, aggregate) if aggregate is not None else None
        run = self.fleet.map(
            task, inputs, name=name, aggregate=fn, max_in_flight=max_in_flight, budget_usd=budget_usd
        )
        return {
            "run_id": run.id,
            "name": self.redactor.text(run.name),
            "tasks": run.total,
            "budget_usd": budget_usd,
        }

    def status(self, run_id: str) -> dict[str, Any]:
        self.scope.run_record(run_id)
        summary = self.fleet.store.summary(run_id)
        spent, budget = self.ledger.standing(run_id)
        found: dict[str, Any] = self.redactor.value(
            {
                **summary.model_dump(mode="json", exclude={"timed_out_ids"}),
                "spent_usd": round(spent, 6),
                "spent_by_downstream": self.ledger.by_run(run_id),
                "budget_usd": budget if budget is not None else self.settings.budgets.run_usd,
            }
        )
        return found

    def results(
        self, run_id: str, failed_only: bool = False, offset: int = 0, limit: int = 100
    ) -> dict[str, Any]:
        self.scope.run_record(run_id)
        run = self.fleet.get_run(run_id)
        outcomes = [o for o in run.outcomes() if not (failed_only and o.ok)]
        limit = max(1, min(limit, MAX_RESULTS))
        page = outcomes[max(0, offset) : max(0, offset) + limit]
        return {
            "run_id": run_id,
            "status": run.summary().status,
            "total": len(outcomes),
            "offset": offset,
            "outcomes": [
                self.redactor.value(
                    o.model_dump(
                        mode="json",
                        include={
                            "index",
                            "item_key",
                            "ok",
                            "result",
                            "error_type",
                            "error",
                            "attempts",
                            "cost_usd",
                        },
                    )
                )
                for o in page
            ],
            "aggregate": self.redactor.value(self.fleet.store.get_aggregate(run_id)),
        }

    def dlq_stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = self.redactor.value(self.scope.dlq_stats())
        return stats


def _http_auth(settings: Settings, base_url: str) -> dict[str, Any]:
    """The ``MCPServer`` arguments that make every HTTP request show the service token."""
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings

    token = settings.service.token
    if token is None:
        raise DispatchError("the MCP server over HTTP needs AGENTFLEET_SERVICE__TOKEN (service.token) set")
    expected = token.get_secret_value().encode()

    class ServiceToken:
        async def verify_token(self, given: str) -> AccessToken | None:
            if hmac.compare_digest(given.encode(), expected):
                return AccessToken(token="service", client_id="agentfleet-operator", scopes=[])
            return None

    auth = AuthSettings.model_validate(
        {
            "issuer_url": base_url,
            "resource_server_url": f"{base_url}{MCP_PATH}",
            "validate_token_resource": False,
        }
    )
    return {"auth": auth, "token_verifier": ServiceToken()}


@contextlib.contextmanager
def _told_to_the_client() -> Iterator[None]:
    """Our own errors reach the client with their message (the SDK hides any other)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        yield
    except AgentfleetError as exc:
        raise ToolError(str(exc)) from None


def build_server(tools: FleetTools, *, http_base_url: str | None = None) -> Any:
    """An ``MCPServer`` named ``agentfleet`` with the four tools; with ``http_base_url`` (the
    address it will be served at over HTTP), every request must carry the service token.

    Imported lazily: ``mcp`` is needed only by this command.
    """
    from mcp.server.mcpserver import MCPServer

    auth = _http_auth(tools.settings, http_base_url) if http_base_url else {}
    server = MCPServer(
        "agentfleet",
        **auth,
        instructions=(
            "Run many independent tasks in parallel on an agentfleet cluster. Start a run with "
            "fan_out_tasks, then poll run_status until its status is finished, then read run_results."
        ),
    )

    @server.tool(
        description=(
            "Start a run: the registered fleet task `task` once per object of `inputs` (each its "
            "keyword inputs), in parallel on the cluster. Returns the run id at once; poll run_status."
        )
    )
    def fan_out_tasks(
        task: Annotated[str, Field(description="A registered fleet task name, e.g. agentfleet.review_diff")],
        inputs: Annotated[list[dict[str, Any]], Field(description="One object of keyword inputs per item")],
        name: Annotated[str | None, Field(description="A name for the run")] = None,
        max_in_flight: Annotated[
            int | None,
            Field(
                ge=1, le=MAX_IN_FLIGHT, description="At most this many items executing at once, cluster-wide"
            ),
        ] = None,
        budget_usd: Annotated[
            float | None,
            Field(
                gt=0,
                allow_inf_nan=False,
                description="Stop the run's items once it has spent this many US dollars (finite)",
            ),
        ] = None,
        aggregate: Annotated[
            str | None,
            Field(
                description="An aggregate the operator allows (e.g. agentfleet.merge:concat), "
                "run once on the successful results"
            ),
        ] = None,
    ) -> dict[str, Any]:
        with _told_to_the_client():
            return tools.fan_out(task, inputs, name, max_in_flight, budget_usd, aggregate)

    @server.tool(description="A run's progress: counts by outcome, status, cost and spend by downstream.")
    def run_status(
        run_id: Annotated[str, Field(description="The id fan_out_tasks returned")],
    ) -> dict[str, Any]:
        with _told_to_the_client():
            return tools.status(run_id)

    @server.tool(description="A run's outcomes (results or errors, in input order) and its aggregate.")
    def run_results(
        run_id: Annotated[str, Field(description="The id fan_out_tasks returned")],
        failed_only: Annotated[bool, Field(description="Only the failed items")] = False,
        offset: Annotated[int, Field(ge=0, description="Skip this many outcomes")] = 0,
        limit: Annotated[int, Field(ge=1, le=MAX_RESULTS, description="Return at most this many")] = 100,
    ) -> dict[str, Any]:
        with _told_to_the_client():
            return tools.results(run_id, failed_only, offset, limit)

    @server.tool(description="The dead-letter queue: depth, by category and downstream, top failures.")
    def dlq_stats() -> dict[str, Any]:
        with _told_to_the_client():
            return tools.dlq_stats()

    return server


def http_app(server: Any, *, host: str, tools: FleetTools) -> Any:
    """The streamable-HTTP ASGI app of ``server`` (built with ``http_base_url``) at ``MCP_PATH``,
    its bearer checks throttled per client address in the Redis of ``tools``' fleet."""
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    return AuthGuard(app, AuthThrottle.from_settings(tools.settings, tools.fleet.store.client))
