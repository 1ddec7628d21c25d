"""``agentfleet serve``: the health, metrics, run-trigger and console service (uvicorn)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from agentfleet.cli.output import console
from agentfleet.config import get_settings
from agentfleet.tasks.process_logging import install_secret_filter

if TYPE_CHECKING:
    import uvicorn

__all__ = ["serve", "service_server"]


def serve(
    host: str | None = typer.Option(
        None, help="Address to bind (default service.host, 127.0.0.1).", metavar="HOST"
    ),
    port: int | None = typer.Option(
        None, min=1, max=65535, help="Port (default service.port, 8080).", metavar="PORT"
    ),
    log_level: str = typer.Option("warning", help="uvicorn's log level.", metavar="LEVEL"),
) -> None:
    """Serve health, metrics, the run trigger and the console.

    Paths: GET /health, GET /metrics, POST /runs, GET /runs/ID and /console.
    """
    from agentfleet.service import create_app
    from agentfleet.service.server import banner

    settings = get_settings()
    bind_host = host or settings.service.host
    bind_port = port or settings.service.port
    app = create_app(settings)
    console.print(banner(settings, host=bind_host, port=bind_port), highlight=False, soft_wrap=True)
    server = service_server(app, host=bind_host, port=bind_port, log_level=log_level)
    server.run()


def service_server(app: Any, *, host: str, port: int, log_level: str) -> uvicorn.Server:
    """The uvicorn server for ``app`` with the settings' limits (``service/server.py``), its log
    handlers (set up by its config) filtered for secrets."""
    from agentfleet.service.server import service_server as hardened

    server = hardened(app, get_settings().service, host=host, port=port, log_level=log_level)
    install_secret_filter()
    return server
