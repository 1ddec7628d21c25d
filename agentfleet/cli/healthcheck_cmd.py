"""``agentfleet healthcheck``: the container probes of the compose deployment.

Each exits 0 when its service is up and 1 (with one line saying why) when it is not; they
read hosts and ports from the same settings as the services they probe.
"""

from __future__ import annotations

import socket

import httpx
import typer

from agentfleet.cli.output import console
from agentfleet.config import get_settings
from agentfleet.redis_client import broker_client

__all__ = ["healthcheck_app"]

healthcheck_app = typer.Typer(help="Probes for container healthchecks: exit 0 when up.", no_args_is_help=True)


def _down(message: str) -> None:
    console.print(message, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def _get(url: str, timeout_s: float) -> None:
    try:
        response = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        _down(f"{url} does not answer: {exc}")
        return
    if response.status_code != 200:
        _down(f"{url} answered {response.status_code}")
    console.print(f"{url} answered 200", highlight=False)


def _local(host: str) -> str:
    # A service bound to every interface is probed on loopback, from inside its container.
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


@healthcheck_app.command("worker")
def worker(
    node: str = typer.Option(
        ..., help="The worker's node name, e.g. agents@%h (%h: this host's name).", metavar="NODE"
    ),
    timeout_s: float = typer.Option(5.0, min=0.1, help="Seconds to wait for the reply.", metavar="SECONDS"),
) -> None:
    """The worker NODE answers a ping."""
    from kombu.exceptions import OperationalError

    from agentfleet.celery_config import make_app

    name = node.replace("%h", socket.gethostname())
    app = make_app(get_settings())
    try:
        replies = app.control.ping(destination=[name], timeout=timeout_s) or []
    except OperationalError as exc:
        _down(f"cannot reach the broker: {exc}")
        return
    finally:
        app.close()
    if not any(name in reply for reply in replies):
        _down(f"worker {name} did not answer a ping in {timeout_s} s")
    console.print(f"worker {name} answered", highlight=False)


@healthcheck_app.command("beat")
def beat() -> None:
    """A beat holds the schedule lock (it renews it on every wake)."""
    from redbeat.schedulers import RedBeatConfig

    from agentfleet.celery_config import make_app

    settings = get_settings()
    app = make_app(settings)
    try:
        # redbeat's own name for its lock, under the prefix agentfleet gives it.
        lock = RedBeatConfig(app).lock_key
    finally:
        app.close()
    ttl_ms = int(broker_client(settings).pttl(lock))
    if ttl_ms <= 0:
        _down("no beat holds the schedule lock")
    console.print(f"a beat holds the schedule lock ({ttl_ms / 1000:.1f} s before it must renew)")


@healthcheck_app.command("flower")
def flower(timeout_s: float = typer.Option(5.0, min=0.1, help="Seconds to wait.", metavar="SECONDS")) -> None:
    """Flower answers on /healthcheck."""
    settings = get_settings().flower
    _get(f"http://{_local(settings.host)}:{settings.port}/healthcheck", timeout_s)


@healthcheck_app.command("api")
def api(timeout_s: float = typer.Option(5.0, min=0.1, help="Seconds to wait.", metavar="SECONDS")) -> None:
    """The service (agentfleet serve) answers 200 on /health."""
    settings = get_settings().service
    _get(f"http://{_local(settings.host)}:{settings.port}/health", timeout_s)
