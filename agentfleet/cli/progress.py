"""Following a run: a live progress bar on a terminal, a plain line every so often elsewhere.

Both show the items done of the run's total (succeeded and failed), its retries and deferrals
(from the run store), every downstream paused for all workers for more than
``limiter.pause_notice_s`` (with the time left), and an estimate of the time left at the
rate items have finished so far. Outcomes are read on a thread of their own, so the display
is refreshed every second even while no item finishes.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentfleet.cli.output import console
from agentfleet.dlq.stats import format_age
from agentfleet.models import TaskOutcome
from agentfleet.orchestration import Fleet, Run
from agentfleet.ratelimit import Limiter

__all__ = ["RunProgress", "follow"]

_TICK_S = 1.0
_DONE = object()


@dataclass
class RunProgress:
    """What the display says about a run: counts, waits, pauses and the time left."""

    total: int
    succeeded: int = 0
    failed: int = 0
    retries: int = 0
    deferrals: int = 0
    paused: dict[str, float] | None = None
    elapsed_s: float = 0.0

    @property
    def done(self) -> int:
        return self.succeeded + self.failed

    def eta_s(self) -> float | None:
        """Seconds left at the rate items have finished so far (None before the first)."""
        if not self.done or self.elapsed_s <= 0:
            return None
        return (self.total - self.done) * self.elapsed_s / self.done

    def status(self, *, markup: bool) -> str:
        ok, bad = ("[green]", "[/green]"), ("[red]", "[/red]")
        if not markup:
            ok = bad = ("", "")
        parts = [f"{ok[0]}{self.succeeded} ok{ok[1]}"]
        if self.failed:
            parts.append(f"{bad[0]}{self.failed} failed{bad[1]}")
        if self.retries:
            parts.append(f"{self.retries} retries")
        if self.deferrals:
            parts.append(f"{self.deferrals} deferrals")
        text = ", ".join(parts)
        for downstream, left_s in (self.paused or {}).items():
            text += f"; {downstream} paused {format_age(left_s)}"
        eta = self.eta_s()
        if eta is not None and self.done < self.total:
            text += f"; ETA {format_age(eta)}"
        return text

    def line(self, label: str) -> str:
        """The plain line printed when the output is not a terminal."""
        stamp = datetime.now().strftime("%H:%M:%S")
        return f"{stamp} {label}: {self.done}/{self.total} done ({self.status(markup=False)})"


def _read_outcomes(run: Run, timeout_s: float | None, sink: queue.Queue[object]) -> None:
    try:
        for outcome in run.as_completed(timeout_s):
            sink.put(outcome)
    finally:
        sink.put(_DONE)


def follow(
    run: Run,
    fleet: Fleet,
    *,
    timeout_s: float | None,
    on_outcome: Callable[[TaskOutcome], None] | None = None,
    label: str = "agents",
    plain_every_s: float = 10.0,
) -> list[TaskOutcome]:
    """Show the run's progress until it ends or ``timeout_s`` passes; return the outcomes seen.

    On a terminal, a live bar; otherwise a plain line every ``plain_every_s`` seconds and one
    at the end.
    """
    follower = _Follower(run, fleet, on_outcome)
    threading.Thread(target=_read_outcomes, args=(run, timeout_s, follower.arrivals), daemon=True).start()
    if console.is_terminal:
        follower.live(label)
    else:
        follower.plain(label, plain_every_s)
    return follower.seen


class _Follower:
    """One run followed: the outcomes seen, the display's state, and the two displays."""

    def __init__(self, run: Run, fleet: Fleet, on_outcome: Callable[[TaskOutcome], None] | None) -> None:
        self.run = run
        self.on_outcome = on_outcome
        self.seen: list[TaskOutcome] = []
        self.state = RunProgress(total=run.total)
        self.limiter = Limiter.from_settings(fleet.settings, fleet.store.client)
        self.notice_s = fleet.settings.limiter.pause_notice_s
        self.arrivals: queue.Queue[object] = queue.Queue()
        self.started = time.monotonic()

    def refresh(self) -> None:
        summary = self.run.summary()
        self.state.retries, self.state.deferrals = summary.retries, summary.deferrals
        self.state.paused = self.limiter.paused(self.notice_s)
        self.state.elapsed_s = time.monotonic() - self.started

    def drain(self, wait_s: float) -> bool:
        """Take what arrived within ``wait_s`` seconds; False once every outcome is in."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                item = self.arrivals.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return True
            if item is _DONE:
                return False
            assert isinstance(item, TaskOutcome)
            self.seen.append(item)
            if item.ok:
                self.state.succeeded += 1
            else:
                self.state.failed += 1
            if self.on_outcome is not None:
                self.on_outcome(item)

    def live(self, label: str) -> None:
        """A live bar, refreshed every second, until every outcome is in."""
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=False) as progress:
            bar = progress.add_task(label, total=self.run.total, status="")
            going = True
            while going:
                going = self.drain(_TICK_S)
                self.refresh()
                progress.update(bar, completed=self.state.done, status=self.state.status(markup=True))

    def plain(self, label: str, every_s: float) -> None:
        """A plain line every ``every_s`` seconds and one once every outcome is in."""
        last_line = time.monotonic()
        going = True
        while going:
            going = self.drain(_TICK_S)
            if time.monotonic() - last_line >= every_s or not going:
                self.refresh()
                console.print(self.state.line(label), markup=False, highlight=False, soft_wrap=True)
                last_line = time.monotonic()
