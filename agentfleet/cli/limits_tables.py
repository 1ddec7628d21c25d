"""Rich renderings of the limits table and a concurrency plan (built here, printed by commands)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from agentfleet.ratelimit import FLEET, ConcurrencyPlan, LimitStatus

__all__ = ["limits_table", "plan_view"]

# How each LimitSpec field reads in a table cell.
_LIMIT_LABELS = {
    "rate_per_s": "{:g}/s",
    "burst": "burst {:g}",
    "max_concurrency": "{:g} at once",
    "requests_per_min": "{:g} req/min",
    "input_tokens_per_min": "{:g} input tok/min",
    "output_tokens_per_min": "{:g} output tok/min",
}


def _limits(status: LimitStatus) -> str:
    parts = [_LIMIT_LABELS[k].format(v) for k, v in status.limits.items() if k in _LIMIT_LABELS]
    text = ", ".join(parts) or "none"
    return text if status.configured or status.downstream == FLEET else f"{text} (default)"


def _tokens(status: LimitStatus) -> str:
    if not status.buckets:
        return "-"
    return "\n".join(f"{b.name} {b.tokens:,.1f} / {b.capacity:,.0f}" for b in status.buckets)


def _slots(status: LimitStatus) -> str:
    if status.max_slots is None:
        return f"{status.slots_in_use} (no cap)" if status.slots_in_use else "-"
    return f"{status.slots_in_use} / {status.max_slots}"


def _paused(status: LimitStatus) -> Text:
    if status.paused_until is None:
        return Text("-")
    until = datetime.fromtimestamp(status.paused_until).strftime("%H:%M:%S")
    return Text(f"{status.paused_for_s:.1f} s more (until {until})", style="yellow")


def limits_table(statuses: Iterable[LimitStatus], *, title: str = "limits") -> Table:
    """One row per downstream: its limits, tokens left per bucket, slots held, pause."""
    table = Table(title=title)
    table.add_column("downstream", no_wrap=True)
    table.add_column("limits", overflow="fold", ratio=2)
    table.add_column("tokens left", overflow="fold", ratio=2)
    table.add_column("slots", no_wrap=True)
    table.add_column("paused", overflow="fold")
    for status in statuses:
        name = "fleet (max_parallelism)" if status.downstream == FLEET else status.downstream
        table.add_row(name, _limits(status), _tokens(status), _slots(status), _paused(status))
    return table


def plan_view(plan: ConcurrencyPlan) -> RenderableType:
    """The plan's figures, then the arithmetic in words."""
    table = Table(show_header=False, title="concurrency plan")
    table.add_column("field", style="bold")
    table.add_column("value", justify="right")
    table.add_row("requests per second", f"{plan.rps:g}")
    table.add_row("latency per call", f"{plan.latency_s:g} s")
    table.add_row("calls in flight (rate x latency)", f"{plan.in_flight:g}")
    table.add_row("headroom", f"{plan.headroom:.0%}")
    table.add_row("max_concurrency with rate_per_s", str(plan.concurrency))
    table.add_row("max_concurrency as the only limit", str(plan.cap_only_concurrency))
    return Group(table, Text(plan.explain()))
