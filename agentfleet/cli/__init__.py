"""The ``agentfleet`` command: every user error is one line on stderr and a non-zero exit."""

from __future__ import annotations

import sys

__all__ = ["main"]


def _redacted(message: str) -> str:
    """``message`` without any secret the settings know, nor any URL's password."""
    from agentfleet.errors import AgentfleetError
    from agentfleet.redaction import Redactor

    try:
        from agentfleet.config import get_settings

        redactor = get_settings().redactor()
    except AgentfleetError:
        # The settings themselves are what failed: URL passwords are still masked.
        redactor = Redactor.build()
    return redactor.text(message)


def _fail(message: str, code: int = 2) -> None:
    from rich.markup import escape

    from agentfleet.cli.output import err_console
    from agentfleet.display import visible

    err_console.print(
        f"[red]error:[/red] {escape(visible(_redacted(message)))}", highlight=False, soft_wrap=True
    )
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
