"""The run options of a caller from outside the process: ``POST /runs`` and the MCP tool.

Both take every run option (``RunOptions``, ``config/options.py``), checked as every
surface checks them, and two rules more, since such a caller holds a token, not the
operator's trust:

- an aggregate is only one the operator allows (``callables.outside_aggregate``: decided on
  the name alone, nothing imported);
- a budget the caller gives is at most ``service.max_run_usd`` (default ``budgets.run_usd``):
  a caller may lower the operator's cap, never raise it. A named fan-out's own budget is the
  operator's, and holds as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfleet.callables import outside_aggregate
from agentfleet.config import RunOptions, Settings, run_options
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.named import start_named
from agentfleet.orchestration.run import Run

__all__ = ["outside_options", "start_for_caller"]


def _within_cap(settings: Settings, budget_usd: float) -> None:
    cap = settings.service.max_run_usd or settings.budgets.run_usd
    if cap is not None and budget_usd > cap:
        raise DispatchError(
            f"budget_usd {budget_usd:g} is more than this server allows: at most {cap:g} US dollars "
            "(service.max_run_usd, else budgets.run_usd)"
        )


def outside_options(
    settings: Settings, given: Mapping[str, Any], *, base: RunOptions | None = None
) -> RunOptions:
    """The options a caller ``given`` (over a named fan-out's, ``base``), once they hold for an
    outside caller; else ``DispatchError``."""
    options = run_options(base, **given)
    if isinstance(options.aggregate, str):
        options = options.model_copy(update={"aggregate": outside_aggregate(settings, options.aggregate)})
    if given.get("budget_usd") is not None and options.budget_usd is not None:
        _within_cap(settings, options.budget_usd)
    return options


def start_for_caller(
    fleet: Fleet, name: str, inputs: Sequence[Mapping[str, Any]] | None, given: Mapping[str, Any]
) -> Run:
    """Start the named fan-out ``name`` for an outside caller, with its ``inputs`` (default: the
    fan-out's) and options ``given`` over the fan-out's own.

    Raises ``ConfigError`` for an unknown name and ``DispatchError`` for what cannot run.
    """
    spec = fleet.settings.fanout(name)
    return start_named(fleet, name, inputs, options=outside_options(fleet.settings, given, base=spec))
