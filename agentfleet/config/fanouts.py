"""Named fan-outs: the ``[fanouts.NAME]`` and ``[schedules.NAME]`` tables of ``agentfleet.toml``.

A named fan-out is a task, its inputs and any of the run options (``config/options.py``),
written flat in its table::

    [fanouts.triage]
    task = "myapp.tasks.triage"
    inputs = "inputs/tickets.jsonl"
    budget_usd = 2.0
    tenant = "support"
    max_in_flight = 20
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator
from pydantic import model_validator as _model_validator

from agentfleet.config.cron import cron_schedule
from agentfleet.config.options import AGGREGATE_NAME, RunOptions, ruled

__all__ = ["FanoutSpec", "ScheduleSpec"]


class FanoutSpec(RunOptions):
    """A named fan-out: ``task`` (a registered task name) mapped over ``inputs``, with any of
    the run options (the run's name defaults to the fan-out's).

    ``inputs`` is a JSON Lines path (one object of keyword arguments a line; a relative path
    is read beside ``agentfleet.toml``) or a list of tables. A ``POST /runs`` to ``agentfleet
    serve`` names the fan-out and may bring its own inputs and options instead.
    """

    task: str = Field(min_length=1)
    inputs: str | list[dict[str, Any]] = Field(default_factory=list)
    # A file names its aggregate; it cannot hold the function itself.
    aggregate: Annotated[
        Annotated[str, StringConstraints(pattern=AGGREGATE_NAME)] | None, ruled("aggregate")
    ] = Field(default=None, description=RunOptions.model_fields["aggregate"].description)


class ScheduleSpec(FanoutSpec):
    """A named fan-out that celery beat starts on a cron expression or an interval, never both.

    ``cron`` has five fields (minute hour day-of-month month day-of-week, in UTC);
    ``interval_s`` is in seconds.
    """

    cron: str | None = None
    interval_s: float | None = Field(default=None, gt=0)

    @field_validator("cron")
    @classmethod
    def _cron_shape(cls, value: str | None) -> str | None:
        if value is None:
            return None
        cron_schedule(value)
        return " ".join(value.split())

    @_model_validator(mode="after")
    def _one_trigger(self) -> ScheduleSpec:
        if (self.cron is None) == (self.interval_s is None):
            raise ValueError("set exactly one of cron (e.g. '0 6 * * *') or interval_s")
        return self
