"""Agent checkpoints: where a ``run_agent`` call got to, so a later execution resumes there.

The ``n``-th ``run_agent`` call of an execution keeps, in its item's memory
(``agentfleet.runs.memory``):

- ``a{n}``: the conversation after the last model turn (every message, the turns made, the
  tool calls so far, and the final text once the model ended its turn), rewritten after each
  model turn and after each round of tool results;
- ``a{n}:t:{tool_use_id}``: each tool call's result, written once, as soon as that tool
  returns (so of several tools run at once, those that finished are not run again);
- ``a{n}:w:{tool_use_id}``: the seconds that tool call has waited for rate limits so far.

A checkpoint carries a fingerprint of the call (prompt, system, model, tools, ``max_tokens``):
one written by a different call (the code changed between attempts) is ignored and the
conversation starts over.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from agentfleet.idempotency import stable_hash
from agentfleet.tasks.memory import Memory

__all__ = ["AgentCheckpoint", "Checkpointer", "StoredTool"]


@dataclass
class AgentCheckpoint:
    """One agent's progress: the messages sent so far (the last may be the model's reply
    asking for tools), model calls made, tool calls made (as ``ToolCall`` dicts), and the
    final ``{"text", "stop_reason"}`` once the model ended its turn."""

    fingerprint: str
    messages: list[dict[str, Any]]
    turns: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)
    final: dict[str, Any] | None = None


@dataclass(frozen=True)
class StoredTool:
    """A tool call that returned: its ``tool_result`` block and its ``ToolCall`` as a dict."""

    result: dict[str, Any]
    call: dict[str, Any]


class Checkpointer:
    """Reads and writes the checkpoints of agent number ``agent`` in ``memory``."""

    def __init__(self, memory: Memory, agent: int, fingerprint: str) -> None:
        self.memory = memory
        self.field = f"a{agent}"
        self.fingerprint = fingerprint

    @staticmethod
    def fingerprint_of(**call: Any) -> str:
        """A stable digest of a ``run_agent`` call's arguments."""
        return stable_hash(call, length=24)

    def load(self) -> AgentCheckpoint | None:
        """This agent's checkpoint, or None (none yet, or one of another call)."""
        raw = self.memory.read([self.field]).get(self.field)
        if not raw or raw.get("fingerprint") != self.fingerprint:
            return None
        return AgentCheckpoint(**raw)

    def save(self, checkpoint: AgentCheckpoint) -> None:
        self.memory.write(self.field, asdict(checkpoint))

    def tools(self, ids: list[str]) -> dict[str, StoredTool]:
        """The stored results of the tool calls ``ids``, by id (those that returned)."""
        found = self.memory.read([f"{self.field}:t:{i}" for i in ids])
        return {key.rsplit(":t:", 1)[1]: StoredTool(**value) for key, value in found.items()}

    def save_tool(self, tool_use_id: str, stored: StoredTool) -> None:
        self.memory.write(f"{self.field}:t:{tool_use_id}", asdict(stored), once=True)

    def waited(self, tool_use_id: str) -> float:
        """Seconds the tool call ``tool_use_id`` has waited for rate limits so far."""
        return float(
            self.memory.read([f"{self.field}:w:{tool_use_id}"]).get(f"{self.field}:w:{tool_use_id}", 0)
        )

    def add_wait(self, tool_use_id: str, seconds: float) -> None:
        self.memory.write(f"{self.field}:w:{tool_use_id}", self.waited(tool_use_id) + seconds)
