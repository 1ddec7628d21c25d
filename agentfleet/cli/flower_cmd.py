"""``agentfleet flower``: Flower for the agentfleet app, with basic auth, on loopback.

It runs ``celery -A agentfleet.celery_app flower``, where ``agentfleet.tasks.flower_setup``
applies the settings (auth, address, port) whichever way Flower is started; this command
adds an early check and the warning below. Flower answers ``/metrics`` and ``/healthcheck``
without credentials whatever its auth settings, so it binds 127.0.0.1 unless told otherwise
and says so when told otherwise. Scrape ``agentfleet serve``'s ``/metrics`` instead.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from collections.abc import Mapping

import typer

from agentfleet.cli.output import err_console
from agentfleet.config import Settings, get_settings
from agentfleet.tasks.flower_setup import flower_auth

__all__ = ["flower", "flower_launch", "is_loopback"]


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def flower_launch(
    settings: Settings,
    *,
    address: str | None,
    port: int | None,
    insecure: bool,
    environ: Mapping[str, str],
) -> tuple[list[str], dict[str, str]]:
    """Flower's command line and environment; ``ConfigError`` when it would run without auth.

    The credentials reach Flower through the settings in its environment, never on a command
    line that ``ps`` shows to every user of the machine.
    """
    if insecure:
        settings = settings.model_copy(
            update={"flower": settings.flower.model_copy(update={"insecure": True})}
        )
    flower_auth(settings)
    env = dict(environ)
    # agentfleet's settings are the one source of Flower's auth: Flower's own variable would win.
    env.pop("FLOWER_BASIC_AUTH", None)
    if insecure:
        env["AGENTFLEET_FLOWER__INSECURE"] = "true"
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "agentfleet.celery_app",
        "flower",
        f"--address={address or settings.flower.host}",
        f"--port={port or settings.flower.port}",
    ]
    return argv, env


def flower(
    host: str | None = typer.Option(
        None, "--host", help="Address to bind (default flower.host, 127.0.0.1).", metavar="HOST"
    ),
    address: str | None = typer.Option(None, "--address", hidden=True, help="Old spelling of --host."),
    port: int | None = typer.Option(
        None, min=1, max=65535, help="Port (default flower.port, 5555).", metavar="PORT"
    ),
    insecure: bool = typer.Option(False, "--insecure", help="Start without authentication."),
) -> None:
    """Start Flower, behind basic auth.

    Flower shows agentfleet.celery_app; its password is AGENTFLEET_FLOWER__BASIC_AUTH.
    """
    settings = get_settings()
    address = host or address
    argv, env = flower_launch(settings, address=address, port=port, insecure=insecure, environ=os.environ)
    bind = address or settings.flower.host
    if not is_loopback(bind):
        err_console.print(
            f"warning: Flower binds {bind}; its /metrics and /healthcheck answer without "
            "credentials, so keep this port on a private network",
            highlight=False,
        )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
