"""``agentfleet serve``: the health, metrics and run-trigger service (uvicorn)."""

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
    host: str | None = typer.Option(None, help="Address to bind (default service.host, 127.0.0.1)."),
    port: int | None = typer.Option(None, min=1, max=65535, help="Port (default service.port, 8080)."),
    log_level: str = typer.Option("warning", help="uvicorn's log level."),
) -> None:
    """Serve GET /health, GET /metrics, POST /runs and GET /runs/{id}."""
    from agentfleet.service import create_app

    settings = get_settings()
    bind_host = host or settings.service.host
    bind_port = port or settings.service.port
    app = create_app(settings)
    trigger = "on" if settings.service.token else "off (set AGENTFLEET_SERVICE__TOKEN)"
    console.print(
        f"agentfleet service on http://{bind_host}:{bind_port} (/health, /metrics; run trigger {trigger})",
        highlight=False,
    )
    server = service_server(app, host=bind_host, port=bind_port, log_level=log_level)
    server.run()


def service_server(app: Any, *, host: str, port: int, log_level: str) -> uvicorn.Server:
    """The uvicorn server for ``app``, its log handlers (set up by its config) filtered for secrets."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False)
    install_secret_filter()
    return uvicorn.Server(config)
