"""The run options as flags of ``agentfleet run``: one per field of ``RunOptions``, made from it.

A flag is its option's name with dashes (``budget_usd`` is ``--budget-usd``; a true-or-false
option is a pair, ``--fail-fast/--no-fail-fast``), its help the option's description. The
values reach ``RunOptions`` as typed, so a bad one gets the rule every surface gives
(``config/options.py``), and a new option is a new flag with nothing to add here.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import typer

from agentfleet.config import RunOptions, run_options

__all__ = ["flag", "with_run_options"]

_METAVARS = {"number": "NUMBER", "integer": "INTEGER", "string": "TEXT"}


def flag(option: str) -> str:
    """The flag of the run option ``option``."""
    return "--" + option.replace("_", "-")


def _kind(schema: dict[str, Any]) -> str:
    """The JSON type of an option's schema, its ``null`` (left out) aside."""
    kinds = [part.get("type") for part in schema.get("anyOf", [schema])]
    return next(kind for kind in kinds if kind != "null")


def _parameter(option: str, schema: dict[str, Any]) -> inspect.Parameter:
    help_text = RunOptions.model_fields[option].description
    kind = _kind(schema)
    if kind == "boolean":
        switch = f"{flag(option)}/--no-{flag(option)[2:]}"
        default: Any = typer.Option(None, switch, help=help_text, show_default=False)
        annotation: Any = bool | None
    else:
        default = typer.Option(None, flag(option), help=help_text, metavar=_METAVARS[kind])
        annotation = str | None
    return inspect.Parameter(option, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def with_run_options(command: Callable[..., None]) -> Callable[..., None]:
    """``command``, which takes ``options: RunOptions``, as a command that takes one flag per
    run option instead and hands it the ``RunOptions`` they make (``DispatchError`` for a bad
    value, before the command runs)."""
    signature = inspect.signature(command, eval_str=True)
    kept = [p for p in signature.parameters.values() if p.name != "options"]
    schemas = RunOptions.model_json_schema()["properties"]
    flags = [_parameter(option, schemas[option]) for option in RunOptions.model_fields]

    @functools.wraps(command)
    def with_flags(**given: Any) -> None:
        chosen = {option: given.pop(option) for option in RunOptions.model_fields}
        command(options=run_options(**chosen), **given)

    with_flags.__signature__ = signature.replace(parameters=[*kept, *flags])  # type: ignore[attr-defined]
    return with_flags
