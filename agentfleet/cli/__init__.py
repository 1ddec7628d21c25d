"""The ``agentfleet`` command: every user error is one line on stderr and a non-zero exit."""

from __future__ import annotations

import sys

__all__ = ["main"]


def _fail(message: str, code: int = 2) -> None:
    from agentfleet.cli.output import err_console

    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    sys.exit(code)


def _redis_failure(exc: Exception) -> str:
    """One line for a Redis error no command turned into a fleet error: refused credentials
    or no answer, naming the broker with its password masked."""
    from agentfleet.broker_check import credentials_refused, refused_error
    from agentfleet.config import get_settings
    from agentfleet.redis_client import mask_url

    try:
        url = get_settings().broker_url
    except Exception:
        url = "the configured Redis"
    if credentials_refused(exc):
        return str(refused_error(url, exc))
    return f"cannot reach Redis at {mask_url(url)}: {exc}"


def main() -> None:
    import redis

    from agentfleet.errors import AgentfleetError

    try:
        from agentfleet.cli.app import app

        app()
    except AgentfleetError as exc:
        _fail(str(exc))
    except redis.ConnectionError as exc:
        _fail(_redis_failure(exc))
    except KeyboardInterrupt:
        _fail("interrupted", 130)
