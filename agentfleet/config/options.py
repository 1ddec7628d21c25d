"""The run options: one typed object that every way of starting a run takes.

``Fleet.map``, ``Fleet.pipeline`` and ``Fleet.graph`` (as keyword arguments, or
``options=RunOptions(...)``), a named fan-out (``[fanouts.NAME]`` and ``[schedules.NAME]`` in
``agentfleet.toml``), ``agentfleet run`` (one flag per option), ``POST /runs`` (fields of its
body) and the MCP tool ``fan_out_tasks`` (its arguments) all take these options, under the
same names, with the same defaults, the same validation and the same documentation: each
field's ``description`` is what ``--help``, the MCP tool's schema and docs/python.md say.

A bad value is refused with the option's one rule (``RULES``), whatever the surface:
``budget_usd must be above 0 US dollars and finite (got 0)``. Python callers get a
``DispatchError``, the settings a ``ConfigError``, HTTP a 422, MCP a tool error, the command
line one line and exit status 2.

What needs the settings is checked where they are known: at dispatch a run's name is
redacted and cut to 200 characters and a tenant holding a secret is refused
(``orchestration/options.py``); a caller from outside the process (HTTP, MCP) may name only
the operator's aggregates and ask for a budget within the operator's cap
(``service/outside.py``).

A new run option is a field here (with its ``description``), its rule in ``RULES``, its key in
``RunOptionArgs``, and its use in ``Fleet._plan`` (``orchestration/fleet.py``); the flag, the
TOML key, the HTTP field and the MCP argument follow from the field. Its row in
docs/python.md's table is checked against the field by tests/test_run_options_surfaces.py.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, WrapValidator
from pydantic import StringConstraints as _Text

from agentfleet.errors import DispatchError

__all__ = [
    "MAX_IN_FLIGHT",
    "MAX_PRIORITY",
    "MAX_TENANT_CHARS",
    "RULES",
    "RunOptionArgs",
    "RunOptions",
    "option_error",
    "ruled",
    "run_options",
    "unknown_option",
]

MAX_IN_FLIGHT = 100_000
MAX_PRIORITY = 9
MAX_TENANT_CHARS = 100
AGGREGATE_NAME = r"^[A-Za-z_][\w.]*[.:][A-Za-z_]\w*$"

# What a valid value of each option is: the one message a bad value gets, on every surface.
RULES: dict[str, str] = {
    "name": "must be text",
    "aggregate": "must be a module-level function or its 'module:function' name",
    "stagger_s": "must be a number of seconds, 0 or more, finite",
    "fail_fast": "must be true or false",
    "max_in_flight": f"must be a whole number from 1 to {MAX_IN_FLIGHT}",
    "tenant": f"must be 1 to {MAX_TENANT_CHARS} letters, digits, '-', '_' or '.'",
    "budget_usd": "must be above 0 US dollars and finite",
    "batch_size": "must be at least 1, a whole number",
    "priority": f"must be a whole number from 0 to {MAX_PRIORITY}, higher first",
}


def ruled(option: str, *, numeric: bool = False) -> WrapValidator:
    """The validator that turns any failure to validate ``option`` into its rule (a bool is no
    number here)."""
    rule = RULES[option]

    def check(value: Any, handler: Callable[[Any], Any]) -> Any:
        if numeric and isinstance(value, bool):
            raise ValueError(rule)
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(rule) from None

    return WrapValidator(check)


_AggregateRef = Annotated[
    Annotated[str, _Text(pattern=AGGREGATE_NAME)] | Callable[..., Any] | None,
    ruled("aggregate"),
    # Outside Python an aggregate is its name: that is all a schema can say.
    WithJsonSchema({"anyOf": [{"type": "string", "pattern": AGGREGATE_NAME}, {"type": "null"}]}),
]


class RunOptions(BaseModel):
    """How a run is run: its label, fan-in, pace, failure policy, caps and order.

    Every option may be left out (``None``, or 0 for ``stagger_s``): the defaults below hold.
    Times are in seconds, money in US dollars.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str | None, ruled("name")] = Field(
        default=None,
        description="A label for the run, shown in listings and pages (default: the task's name, or "
        "the fan-out's); stored with secrets redacted, cut to 200 characters.",
    )
    aggregate: _AggregateRef = Field(
        default=None,
        description="A function run once over the successful results, in input order, after the "
        "run's last item: a module-level function or its module:function name. Callers over HTTP "
        "or MCP may name only the operator's aggregates.",
    )
    stagger_s: Annotated[float, Field(ge=0, allow_inf_nan=False), ruled("stagger_s", numeric=True)] = Field(
        default=0.0,
        description="Spread the items' starts over this many seconds, with jitter (0: all at once).",
    )
    fail_fast: Annotated[bool | None, ruled("fail_fast")] = Field(
        default=None,
        description="Cancel what has not started at the run's first final failure (default: the "
        "fail_fast setting).",
    )
    max_in_flight: Annotated[
        int | None, Field(ge=1, le=MAX_IN_FLIGHT), ruled("max_in_flight", numeric=True)
    ] = Field(
        default=None,
        description="At most this many of the run's items execute at once, across the cluster (a "
        "pool); the others wait without using retries.",
    )
    tenant: Annotated[
        str | None, Field(pattern=r"^[\w.-]+$", max_length=MAX_TENANT_CHARS), ruled("tenant")
    ] = Field(
        default=None,
        description="The tenant whose daily budget the run's spending counts against (budgets.tenants).",
    )
    budget_usd: Annotated[
        float | None, Field(gt=0, allow_inf_nan=False), ruled("budget_usd", numeric=True)
    ] = Field(
        default=None,
        description="Stop the run's items once the run has spent this many US dollars (default: "
        "budgets.run_usd); HTTP and MCP callers may ask at most service.max_run_usd.",
    )
    batch_size: Annotated[int | None, Field(ge=1), ruled("batch_size", numeric=True)] = Field(
        default=None,
        description="Pack this many consecutive items into one message and execution, each keeping "
        "its own outcome, key and dead letter (a map's items only).",
    )
    priority: Annotated[int | None, Field(ge=0, le=MAX_PRIORITY), ruled("priority", numeric=True)] = Field(
        default=None,
        description="Order of the run's waiting messages against other runs', 0 to 9, higher first "
        "(default: 8 for a run of at most dispatch.small_run_items items, else 5).",
    )


class RunOptionArgs(TypedDict, total=False):
    """``RunOptions`` as keyword arguments (``Fleet.map(..., **RunOptionArgs)``), for type checkers."""

    name: str | None
    aggregate: Callable[..., Any] | str | None
    stagger_s: float
    fail_fast: bool | None
    max_in_flight: int | None
    tenant: str | None
    budget_usd: float | None
    batch_size: int | None
    priority: int | None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def unknown_option(name: str) -> str:
    """What to say of ``name`` when it is not a run option: the closest one, and the list."""
    close = difflib.get_close_matches(name, list(RunOptions.model_fields), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return f"unknown run option {name!r}{hint} (the run options: {', '.join(RunOptions.model_fields)})"


def option_error(exc: ValidationError) -> DispatchError:
    """One ``DispatchError`` for what ``RunOptions`` refused: each bad option with its rule."""
    parts = []
    for error in exc.errors():
        option = str(error["loc"][0]) if error["loc"] else "run options"
        if error["type"] == "extra_forbidden":
            parts.append(unknown_option(option))
        else:
            rule = str(error["msg"]).removeprefix("Value error, ")
            parts.append(f"{option} {rule} (got {_shown(error['input'])})")
    return DispatchError("; ".join(parts))


def run_options(base: RunOptions | None = None, /, **given: Any) -> RunOptions:
    """``base``'s options (those it sets; a fan-out's, say) with ``given`` on top, validated.

    A ``None`` in ``given`` leaves the option as ``base`` has it. Raises ``DispatchError``
    naming each bad or unknown option.
    """
    unknown = [name for name in given if name not in RunOptions.model_fields]
    if unknown:
        raise DispatchError("; ".join(unknown_option(name) for name in unknown))
    values: dict[str, Any] = {}
    if base is not None:
        values = {
            name: getattr(base, name) for name in base.model_fields_set if name in RunOptions.model_fields
        }
    values.update((name, value) for name, value in given.items() if value is not None)
    try:
        return RunOptions.model_validate(values)
    except ValidationError as exc:
        raise option_error(exc) from None
