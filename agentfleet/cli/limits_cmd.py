"""``agentfleet limits``: the cluster's rate limits now, and sizing a concurrency cap."""

from __future__ import annotations

import typer

from agentfleet.cli.connect import require_broker
from agentfleet.cli.limits_tables import limits_table, plan_view
from agentfleet.cli.limits_views import LimitsView, limits_views
from agentfleet.cli.output import console, err_console, print_json
from agentfleet.config import get_settings
from agentfleet.ratelimit import FLEET, LimitStatus, concurrency_plan
from agentfleet.redis_client import state_client

__all__ = ["limits_app"]

limits_app = typer.Typer(
    help="Cluster-wide rate limits: what is left, and sizing a cap.",
    no_args_is_help=True,
)

_NONE_YET = "no downstreams yet: none is in the limits table and none has been called lately"
_JSON = typer.Option(False, "--json", help="Print one JSON document.")
_DOWNSTREAMS = typer.Argument(
    None,
    help="Only these downstreams (a host, or provider:model). Default: every one known.",
    metavar="DOWNSTREAM",
)


@limits_app.command("show")
def show(
    downstreams: list[str] | None = _DOWNSTREAMS,
    as_json: bool = _JSON,
) -> None:
    """Each downstream's limits, tokens left, slots in use and pause.

    The limits are those the live workers apply (from their heartbeats), and the title says
    whose they are; with no live worker, this process's configuration. Known downstreams are
    those in the limits table and those called or paused in the last hour; with
    max_parallelism set, the fleet-wide ceiling is shown too.
    """
    require_broker()
    settings = get_settings()
    views = limits_views(settings, state_client(settings))
    found = [(view, _statuses(view, downstreams)) for view in views]
    if as_json:
        (first, statuses), others = found[0], found[1:]
        print_json(
            {
                "view": first.source,
                "workers": list(first.workers),
                "downstreams": [s.as_dict() for s in statuses],
                "other_views": [
                    {"workers": list(v.workers), "downstreams": [s.as_dict() for s in ss]} for v, ss in others
                ],
            }
        )
        return
    if len(views) > 1:
        err_console.print(
            f"the live workers apply {len(views)} different limits configurations: one table each"
        )
    for view, statuses in found:
        if statuses:
            console.print(limits_table(statuses, title=view.title))
        else:
            console.print(f"{view.title}: {_NONE_YET}")


def _statuses(view: LimitsView, downstreams: list[str] | None) -> list[LimitStatus]:
    limiter = view.limiter
    names = list(downstreams) if downstreams else limiter.known_downstreams()
    statuses = [limiter.status(name) for name in names]
    if limiter.max_parallelism is not None and not downstreams:
        statuses.append(limiter.status(FLEET))
    return statuses


@limits_app.command("plan")
def plan(
    rps: float = typer.Option(..., "--rps", help="Requests a second the downstream allows.", metavar="RATE"),
    latency_s: float = typer.Option(
        ..., "--latency-s", help="Seconds one call takes, on average.", metavar="SECONDS"
    ),
    headroom: float = typer.Option(
        0.2, "--headroom", help="Extra slots for slow calls, as a fraction: 0.2 is 20%.", metavar="SHARE"
    ),
    as_json: bool = _JSON,
) -> None:
    """Size max_concurrency with Little's law.

    Calls in flight = rate x latency, plus headroom.
    """
    found = concurrency_plan(rps, latency_s, headroom)
    if as_json:
        print_json(found.as_dict())
    else:
        console.print(plan_view(found))
