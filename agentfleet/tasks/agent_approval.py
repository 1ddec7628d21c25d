"""Tools that need a person's approval: ``Tool(..., requires_approval=True)``.

Before ``run_agent`` runs a call of such a tool it asks ``ctx.approval`` with the tool's name
and its arguments (redacted) as the details. The first time, that parks the item (no slot
held: ``tasks/pauses.py``); the conversation up to the model's reply asking for the tool is
already checkpointed, so the decision resumes the agent at this very call:

- approved: the tool runs, with ``decision.data`` in place of the model's arguments when the
  person edited them (it must be an object valid against the tool's ``input_schema``, else
  the tool does not run and the model is told why);
- rejected (or timed out, with the call's ``on_timeout`` of ``reject``): the tool does not
  run and the model receives the rejection, with the comment, as the tool's result (an
  error result), so it can change course.

Each tool call is its own approval, named ``tool:<name>#<tool_use id>``: the id (kept in the
checkpointed conversation) makes it the same approval on every resume and a different one for
the next call of the same tool. It needs agent checkpoints (``agent.checkpoint``, on by
default): without one the resumed agent would ask the model again, which names a new call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema

from agentfleet.config import get_settings
from agentfleet.errors import ConfigError

if TYPE_CHECKING:
    from agentfleet.tasks.agent import Tool
    from agentfleet.tasks.context import TaskContext

__all__ = ["Gate", "approval_name", "ask"]


@dataclass(frozen=True)
class Gate:
    """What the approval decided for one tool call: run it with ``arguments``, or answer the
    model with ``refusal`` (an error result) instead."""

    arguments: dict[str, Any]
    refusal: str | None = None


def approval_name(tool: Tool, tool_use_id: str) -> str:
    """The approval's name for one call of ``tool``."""
    return f"tool:{tool.name}#{tool_use_id}"


def _schema_problem(tool: Tool, arguments: Any) -> str | None:
    if not isinstance(arguments, dict):
        return f"edited arguments must be a JSON object, not {type(arguments).__name__}"
    try:
        jsonschema.validate(arguments, tool.input_schema)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "the arguments"
        return f"the edited arguments do not match the tool's schema ({where}: {exc.message})"
    except jsonschema.SchemaError as exc:
        return f"the tool's input_schema is not a valid JSON Schema: {exc.message}"
    return None


def ask(ctx: TaskContext, tool: Tool, tool_use_id: str, arguments: dict[str, Any]) -> Gate:
    """The approval of this tool call: parks the item (``Parked``) while none is decided."""
    settings = get_settings()
    if not settings.agent.checkpoint:
        # Without a checkpoint the resumed agent asks the model again, which names a new call.
        raise ConfigError(
            f"tool {tool.name} needs approval, which needs agent checkpoints: set agent.checkpoint = true"
        )
    shown = settings.redactor().value(arguments)
    decision = ctx.approval(
        approval_name(tool, tool_use_id),
        details={"tool": tool.name, "tool_use_id": tool_use_id, "arguments": shown},
        timeout_s=tool.approval_timeout_s,
    )
    who = f" by {decision.by}" if decision.by else ""
    because = f": {decision.comment}" if decision.comment else ""
    if not decision.approved:
        how = "timed out waiting for approval" if decision.timed_out else f"was rejected{who}"
        return Gate(arguments, f"The call to {tool.name} {how}; it did not run{because}")
    if decision.data is None:
        return Gate(arguments)
    problem = _schema_problem(tool, decision.data)
    if problem is not None:
        return Gate(
            arguments, f"The call to {tool.name} was approved{who} with edits, but {problem}; it did not run"
        )
    ctx.log.info("tool %s runs with the arguments edited at its approval", tool.name)
    return Gate(dict(decision.data))
