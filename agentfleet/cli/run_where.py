"""What ``agentfleet run`` tells about where its work is: the run's id and console page at
dispatch, what Ctrl-C leaves behind, and the outcomes written to a file as they arrive."""

from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import TextIO

from agentfleet.config import Settings
from agentfleet.errors import DispatchError
from agentfleet.models import TaskOutcome

__all__ = ["OutcomeFile", "console_url", "dispatched_line", "interrupted_line"]

# Addresses a server binds to that no browser can open: the page is on this machine.
_ANY_ADDRESS = {"0.0.0.0", "::", ""}


def console_url(settings: Settings, run_id: str) -> str | None:
    """The console's page of ``run_id``: under ``service.public_url`` when set, else on
    ``service.host:service.port``; None when the console is off (no ``service.token``)."""
    service = settings.service
    if service.token is None:
        return None
    if service.public_url:
        base = service.public_url.rstrip("/")
    else:
        host = "127.0.0.1" if service.host in _ANY_ADDRESS else service.host
        host = f"[{host}]" if ":" in host else host
        base = f"http://{host}:{service.port}"
    return f"{base}/console/runs/{run_id}"


def dispatched_line(settings: Settings, run_id: str, total: int) -> str:
    """The line printed once a run is dispatched: its id, how to follow it, its console page."""
    where = console_url(settings, run_id)
    page = f" or {where} (with `agentfleet serve`)" if where else ""
    return f"run {run_id}: {total} tasks dispatched; follow it with `agentfleet runs show {run_id}`{page}"


def interrupted_line(run_id: str, *, cancelled: bool, embedded: bool) -> str:
    """What Ctrl-C leaves behind: a run that goes on (and how to cancel it), a cancelled run,
    or a run whose embedded workers stop with the command."""
    if cancelled:
        return (
            f"interrupted: cancelled run {run_id}; its items that had not started will not run "
            f"(undo succeeded ones with `agentfleet runs compensate {run_id}`)"
        )
    if embedded:
        return (
            f"interrupted: run {run_id} stops unfinished, since the embedded workers stop with this "
            "command; point AGENTFLEET_BROKER_URL at a Redis with workers for runs that outlive it"
        )
    return (
        f"interrupted: run {run_id} goes on in the workers; follow it with `agentfleet runs show "
        f"{run_id}`, stop it with `agentfleet runs cancel {run_id}` (or run with --cancel-on-interrupt)"
    )


class OutcomeFile:
    """``--output FILE``: one JSON line per outcome, written and flushed as each arrives.

    Opened before anything is dispatched, so a path that cannot be written is refused first.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.written = 0
        try:
            self._file: TextIO = Path(path).open("w", encoding="utf-8")  # noqa: SIM115 (closed by close())
        except OSError as exc:
            raise DispatchError(f"--output {path}: {exc.strerror or exc}; nothing was sent") from None

    def write(self, outcome: TaskOutcome) -> None:
        self._file.write(json.dumps(outcome.model_dump(mode="json"), default=str) + "\n")
        self._file.flush()
        self.written += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> OutcomeFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
