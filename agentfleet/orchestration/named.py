"""Named fan-outs: the ``[fanouts.NAME]`` and ``[schedules.NAME]`` tables of ``agentfleet.toml``.

Beat (``agentfleet.maintenance.run_schedule``) and the webhook trigger (``POST /runs``) both
start one by name here, so a scheduled run and a triggered one are the same fan-out, with the
run options its table sets (``config/fanouts.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentfleet.config import FanoutSpec, RunOptions, config_path, run_options
from agentfleet.errors import DispatchError
from agentfleet.orchestration.fleet import Fleet
from agentfleet.orchestration.run import Run

__all__ = ["iter_jsonl", "load_inputs", "parse_jsonl", "resolve_inputs_path", "start_named"]


def resolve_inputs_path(path: str) -> Path:
    """A relative inputs path is read beside ``agentfleet.toml`` (else the working directory)."""
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        return candidate
    config = config_path()
    return (config.parent if config is not None else Path.cwd()) / candidate


def parse_jsonl(text: str, *, source: str) -> list[dict[str, Any]]:
    """Inputs from JSON Lines: one JSON object of keyword inputs a line, blank lines skipped.

    Raises ``DispatchError`` naming ``source`` and the line of the first bad one.
    """
    return list(iter_jsonl(text.splitlines(), source=source))


def iter_jsonl(lines: Iterable[str], *, source: str) -> Iterator[dict[str, Any]]:
    """``parse_jsonl`` one line at a time, for inputs too many to hold (a file of millions)."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DispatchError(f"{source} line {number}: not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise DispatchError(f"{source} line {number}: each line must be a JSON object of inputs")
        yield value


def _read_jsonl(name: str, path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise DispatchError(f"fan-out {name!r}: its inputs file {path} does not exist")
    return parse_jsonl(path.read_text(), source=f"fan-out {name!r}: {path}")


def load_inputs(name: str, spec: FanoutSpec) -> list[dict[str, Any]]:
    """The fan-out's configured inputs: its JSON Lines file, or its inline list."""
    if isinstance(spec.inputs, str):
        return _read_jsonl(name, resolve_inputs_path(spec.inputs))
    return [dict(item) for item in spec.inputs]


def start_named(
    fleet: Fleet,
    name: str,
    inputs: Sequence[Mapping[str, Any]] | None = None,
    *,
    options: RunOptions | None = None,
) -> Run:
    """Start the fan-out ``name`` with ``inputs`` (default: the ones it is configured with) and
    ``options`` (default: the run options its table sets); the run is named after the fan-out
    unless the options name it.

    Raises ``ConfigError`` for an unknown name and ``DispatchError`` for unusable inputs.
    """
    spec = fleet.settings.fanout(name)
    chosen = run_options(spec) if options is None else options
    items = load_inputs(name, spec) if inputs is None else [dict(item) for item in inputs]
    return fleet.map(spec.task, items, options=chosen, name=chosen.name or name)
