"""``agentfleet flower``: Flower for the agentfleet app, with basic auth, on loopback."""

from __future__ import annotations

import ipaddress
import os
import sys

import typer

from agentfleet.cli.output import err_console
from agentfleet.config import get_settings
from agentfleet.errors import ConfigError

__all__ = ["flower", "is_loopback"]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def flower(
    address: str | None = typer.Option(None, help="Address to bind (default flower.host, 127.0.0.1)."),
    port: int | None = typer.Option(None, min=1, max=65535, help="Port (default flower.port, 5555)."),
    insecure: bool = typer.Option(False, "--insecure", help="Start without authentication."),
) -> None:
    """Start Flower for agentfleet.celery_app, behind basic auth (AGENTFLEET_FLOWER__BASIC_AUTH)."""
    settings = get_settings()
    auth = settings.flower.basic_auth
    if auth is None and not insecure:
        raise ConfigError(
            "Flower would start without authentication: set AGENTFLEET_FLOWER__BASIC_AUTH=user:password "
            "(or pass --insecure on a machine only you can reach)"
        )
    bind = address or settings.flower.host
    bind_port = port or settings.flower.port
    if not is_loopback(bind):
        err_console.print(
            f"warning: Flower binds {bind}; its /metrics and /healthcheck answer without "
            "credentials, so keep this port on a private network",
            highlight=False,
        )
    env = dict(os.environ)
    # The credentials go to Flower through its environment, never on a command line that
    # `ps` shows to every user of the machine.
    env.pop("FLOWER_BASIC_AUTH", None)
    if auth is not None:
        env["FLOWER_BASIC_AUTH"] = auth.get_secret_value()
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "agentfleet.celery_app",
        "flower",
        f"--address={bind}",
        f"--port={bind_port}",
    ]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
