"""``agentfleet dev``: a whole fleet on this machine, running until Ctrl-C.

The embedded Redis (or the one configured), one worker sized for LLM work (a gevent pool:
each slot mostly waits on the network), the mock Messages API unless ``ANTHROPIC_API_KEY`` is
set, and ``serve`` with the console, signed in with a token made for this session.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from contextlib import ExitStack

import typer

from agentfleet.cli.output import console
from agentfleet.config import load_settings
from agentfleet.local import LocalCluster
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.redis_client import mask_url

__all__ = ["dev"]


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def dev(
    host: str = typer.Option(
        "127.0.0.1", help="Address the service and console listen on.", metavar="ADDRESS"
    ),
    port: int = typer.Option(8080, min=1, max=65535, help="Port of the service and console.", metavar="PORT"),
    concurrency: int = typer.Option(
        200,
        "--concurrency",
        "-c",
        min=1,
        help="Slots of the gevent worker (LLM calls in flight).",
        metavar="N",
    ),
    log_level: str = typer.Option("warning", help="uvicorn's log level.", metavar="LEVEL"),
) -> None:
    """Run a whole fleet on this machine until Ctrl-C.

    Starts Redis, a gevent worker, the mock Messages API and the console.
    """
    from agentfleet.service import create_app
    from agentfleet.service.server import service_server
    from agentfleet.tasks.process_logging import install_secret_filter

    if not _port_free(host, port):
        console.print(f"error: {host}:{port} is in use; choose another with --port", style="red")
        raise typer.Exit(2)
    given_token = os.environ.get("AGENTFLEET_SERVICE__TOKEN")
    token = given_token or secrets.token_hex(32)
    with ExitStack() as stack:
        env: dict[str, str] = {}
        mock_url = None
        if not os.environ.get("ANTHROPIC_API_KEY"):
            mock_url = stack.enter_context(MockMessagesServer()).url
            env["AGENTFLEET_LLM__BASE_URL"] = mock_url
        cluster = stack.enter_context(
            LocalCluster(workers=1, concurrency=concurrency, pool="gevent", loglevel="WARNING", env=env)
        )
        overrides: dict[str, object] = {"broker_url": cluster.broker_url, "service": {"token": token}}
        if mock_url is not None:
            overrides["llm"] = {"base_url": mock_url}
        settings = load_settings(**overrides)
        app = create_app(settings)
        server = service_server(app, settings.service, host=host, port=port, log_level=log_level)
        install_secret_filter()
        shown_token = None if given_token else token
        banner = _banner(cluster, mock_url, host=host, port=port, concurrency=concurrency, token=shown_token)
        console.print(banner, highlight=False, soft_wrap=True)
        # uvicorn raises the Ctrl-C again once it has shut down: the stop that was asked for.
        with contextlib.suppress(KeyboardInterrupt):
            server.run()
    console.print("agentfleet dev: stopped the service, the worker, the mock and Redis.")


def _banner(
    cluster: LocalCluster, mock_url: str | None, *, host: str, port: int, concurrency: int, token: str | None
) -> str:
    """What ``dev`` prints once everything runs: where each part is and how to send it work
    (``token`` None: the one given in ``AGENTFLEET_SERVICE__TOKEN``)."""
    where = "embedded" if cluster.embedded else "configured"
    llm = f"the mock Messages API at {mock_url}" if mock_url else "the Anthropic API (ANTHROPIC_API_KEY)"
    lines = [
        "agentfleet dev: running until Ctrl-C",
        f"  Redis    {mask_url(cluster.broker_url)} ({where})",
        f"  worker   1 process, gevent pool, {concurrency} slots",
        f"  LLM      {llm}",
        f"  console  http://{host}:{port}/console",
        f"  token    {'as in AGENTFLEET_SERVICE__TOKEN' if token is None else token}",
        "In another shell, to send work to it:",
        f"  export AGENTFLEET_BROKER_URL={cluster.broker_url}",
    ]
    if mock_url is not None:
        lines.append(f"  export AGENTFLEET_LLM__BASE_URL={mock_url}")
    lines.append("  agentfleet run agentfleet.classify_sentiment --inputs INPUTS.jsonl")
    return "\n".join(lines)
