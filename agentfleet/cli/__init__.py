"""The ``agentfleet`` command: every user error is one line on stderr and a non-zero exit."""

from __future__ import annotations

import sys

__all__ = ["main"]


def _fail(message: str, code: int = 2) -> None:
    from agentfleet.cli.output import err_console

    err_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    sys.exit(code)


def main() -> None:
    import redis

    from agentfleet.errors import AgentfleetError

    try:
        from agentfleet.cli.app import app

        app()
    except AgentfleetError as exc:
        _fail(str(exc))
    except redis.ConnectionError as exc:
        _fail(f"cannot reach Redis: {exc}")
    except KeyboardInterrupt:
        _fail("interrupted", 130)
