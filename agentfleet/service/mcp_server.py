"""``agentfleet mcp``: the fleet as tools for any MCP client (the official ``mcp`` SDK).

Tools:

- ``fan_out_tasks(task, inputs, ...run options)``: start a run of a registered fleet task
  over a list of keyword-input objects, with any run option (``RunOptions``: one argument
  each, its schema and description the object's own, validated as every surface validates
  them); returns the run id at once. An aggregate is one of the operator's
  (``agentfleet/callables.py``), refused before anything is imported or started; a budget is
  recorded with the run before any item is sent, at most ``service.max_run_usd`` (default
  ``budgets.run_usd``; ``outside.py``);
- ``run_status(run_id)``: the run's summary and its spend by downstream;
- ``run_results(run_id, failed_only, offset, limit)``: the outcomes (results and errors,
  secrets redacted) and the aggregate;
- ``dlq_stats()``: the dead-letter queue's depth, breakdowns, top fingerprints, vendor issues;
- ``list_approvals`` and ``decide_approval``: the decisions items wait for (``mcp_approvals.py``).

Over stdio the client starts the server and owns it; over streamable HTTP every request must
carry ``Authorization: Bearer <service.token>``, and failed checks are throttled per address
(``service/guard.py``). ``allow_tasks`` (when given) limits which tasks a client may start,
and which runs and dead letters it may read (``mcp_scope.py``).
"""

from __future__ import annotations

import contextlib
import hmac
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any

from pydantic import Field, WithJsonSchema

from agentfleet.access import AuthThrottle
from agentfleet.config import RunOptions, Settings
from agentfleet.errors import AgentfleetError, DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.service.guard import AuthGuard
from agentfleet.service.mcp_approvals import ApprovalTools, register_approval_tools
from agentfleet.service.mcp_scope import McpScope
from agentfleet.service.outside import outside_options
from agentfleet.spend import SpendLedger

__all__ = ["MCP_PATH", "FleetTools", "build_server", "http_app"]

MCP_PATH = "/mcp"
# The most outcomes one run_results call returns.
MAX_RESULTS = 500


class FleetTools:
    """The tools' bodies, on one ``Fleet``: plain methods, testable without MCP."""

    def __init__(self, fleet: Fleet, *, allow_tasks: Sequence[str] = ()) -> None:
        self.fleet = fleet
        self.settings: Settings = fleet.settings
        self.allow_tasks = tuple(allow_tasks)
        self.scope = McpScope(fleet, allow_tasks)
        self.ledger = SpendLedger.from_settings(fleet.settings, fleet.store.client)
        self.redactor = fleet.settings.redactor()

    def fan_out(self, task: str, inputs: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
        """Start ``task`` over ``inputs`` with the run ``options`` (each ``None``: left out)."""
        if not self.scope.task_allowed(task):
            raise DispatchError(f"task {task!r} is not allowed here; allowed: {', '.join(self.allow_tasks)}")
        cap = self.settings.service.max_inputs
        if len(inputs) > cap:
            raise DispatchError(f"{len(inputs)} inputs is more than service.max_inputs ({cap})")
        chosen = outside_options(self.settings, options)
        run = self.fleet.map(task, inputs, options=chosen)
        return {
            "run_id": run.id,
            "name": self.redactor.text(run.name),
            "tasks": run.total,
            "budget_usd": chosen.budget_usd,
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


def _with_run_options(tool: Callable[..., Any]) -> inspect.Signature:
    """``tool``'s signature with its ``**options`` spelt out: one keyword argument per run
    option, whose schema is ``RunOptions``' own. The values reach the tool as given, and are
    validated there by ``RunOptions``, so a bad one gets the rule every surface gives."""
    signature = inspect.signature(tool, eval_str=True)
    fixed = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    schemas = RunOptions.model_json_schema()["properties"]
    options = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=field.default,
            annotation=Annotated[Any, WithJsonSchema(schemas[name])],
        )
        for name, field in RunOptions.model_fields.items()
    ]
    return signature.replace(parameters=[*fixed, *options])


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

    def fan_out_tasks(
        task: Annotated[str, Field(description="A registered fleet task name, e.g. agentfleet.review_diff")],
        inputs: Annotated[list[dict[str, Any]], Field(description="One object of keyword inputs per item")],
        **options: Any,
    ) -> dict[str, Any]:
        with _told_to_the_client():
            return tools.fan_out(task, inputs, **options)

    fan_out_tasks.__signature__ = _with_run_options(fan_out_tasks)  # type: ignore[attr-defined]
    server.tool(
        description=(
            "Start a run: the registered fleet task `task` once per object of `inputs` (each its "
            "keyword inputs), in parallel on the cluster, with any run option. Returns the run id "
            "at once; poll run_status."
        )
    )(fan_out_tasks)

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

    register_approval_tools(server, ApprovalTools(tools.fleet, tools.scope), _told_to_the_client)
    return server


def http_app(server: Any, *, host: str, tools: FleetTools) -> Any:
    """The streamable-HTTP ASGI app of ``server`` (built with ``http_base_url``) at ``MCP_PATH``,
    its bearer checks throttled per client address in the Redis of ``tools``' fleet."""
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host)
    return AuthGuard(app, AuthThrottle.from_settings(tools.settings, tools.fleet.store.client))
