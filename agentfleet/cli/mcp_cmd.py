"""``agentfleet mcp``: serve the fleet's tools to MCP clients, over stdio or streamable HTTP."""

from __future__ import annotations

from enum import StrEnum

import typer

from agentfleet.cli.connect import require_broker
from agentfleet.cli.output import err_console
from agentfleet.errors import ConfigError

__all__ = ["mcp"]


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


_TRANSPORT = typer.Option(
    Transport.stdio, help="stdio (the client starts this) or http.", metavar="stdio|http"
)
_ALLOW = typer.Option(
    [],
    "--allow-task",
    help="A task clients may start (repeat it); default: any registered task.",
    metavar="TASK",
)


def mcp(
    transport: Transport = _TRANSPORT,
    host: str = typer.Option("127.0.0.1", help="Address to bind, with --transport http.", metavar="HOST"),
    port: int = typer.Option(8766, min=1, max=65535, help="Port, with --transport http.", metavar="PORT"),
    allow_task: list[str] = _ALLOW,
) -> None:
    """Serve the fleet's tools to MCP clients.

    The tools: fan_out_tasks, run_status, run_results, dlq_stats, list_approvals and
    decide_approval.

    Over stdio the MCP client starts this command itself; over HTTP (at /mcp) each request
    needs Authorization: Bearer $AGENTFLEET_SERVICE__TOKEN (failed checks are throttled per
    address). Clients see only runs of the allowed tasks, and may name only the operator's
    aggregates. Workers must be running on the configured Redis (AGENTFLEET_BROKER_URL).
    """
    try:
        import mcp as _sdk  # noqa: F401
    except ImportError:
        raise ConfigError("agentfleet mcp needs the MCP SDK: pip install 'agentfleet[mcp]'") from None
    from agentfleet.orchestration import Fleet
    from agentfleet.service.mcp_server import FleetTools, build_server, http_app

    fleet = Fleet(broker_url=require_broker())
    tools = FleetTools(fleet, allow_tasks=allow_task)
    # stdout is the protocol channel over stdio: anything said goes to stderr.
    allowed = ", ".join(allow_task) if allow_task else "any registered task"
    try:
        if transport is Transport.stdio:
            err_console.print(
                f"agentfleet MCP server on stdio (tasks: {allowed}; aggregates: the operator's only)",
                highlight=False,
            )
            build_server(tools).run("stdio")
            return
        from agentfleet.cli.serve_cmd import service_server

        server = build_server(tools, http_base_url=f"http://{host}:{port}")
        app = http_app(server, host=host, tools=tools)
        err_console.print(
            f"agentfleet MCP server on http://{host}:{port}/mcp (bearer token required, failed checks "
            f"throttled per address; tasks: {allowed}; aggregates: the operator's only)",
            highlight=False,
        )
        service_server(app, host=host, port=port, log_level="warning").run()
    finally:
        fleet.close()
