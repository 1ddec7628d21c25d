"""The directive syntax that scripts the mock model from inside a prompt.

A directive is a whole line of the instruction (the latest user message that holds text and
no ``tool_result``) in one of the shapes below, keyword in upper case. Every other line, such
as "USE CAUTION", is the prompt's content.

================================  ============================================================
directive                         the mock model...
================================  ============================================================
``CALL <tool> [<json object>]``   calls ``tool`` with that input (``{}`` if none); several
                                  ``CALL`` lines make several ``tool_use`` blocks in one reply
``USE TOOLS a, b, c``             calls each named tool in one reply, inputs built from each
                                  tool's ``input_schema``; ``in parallel`` may follow
``USE ALL TOOLS``                 calls every tool the request offers, in one reply
``CHAIN a, b, c``                 calls one tool per turn, in order, then answers
``LOOP <tool> [<json object>]``   calls the same tool with the same input on every turn,
                                  never answering (for loop detectors)
``LONG <n>``                      answers about ``n`` output tokens of filler text
``SAY <text>``                    answers exactly ``text`` (the rest of the line)
``FAIL <status> [<retry s>]``     the server answers that HTTP error on every attempt
``SLEEP <seconds>``               the server waits that much longer before answering
================================  ============================================================

Once the tool results of ``CALL``, ``USE`` or a finished ``CHAIN`` come back, the model
answers with a text that sums them up.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentfleet.errors import MockRequestInvalid

__all__ = ["Directives", "ToolDirective", "parse_directives"]

_NAME = r"[A-Za-z0-9_\-]+"
_NAMES = rf"{_NAME}(?:\s*,\s*{_NAME})*(?:\s+in\s+parallel)?\.?"
_NUMBER = r"\d+(?:\.\d+)?"
# A line is a directive only when it has a directive's whole shape, so that prose such as
# "USE CAUTION" stays content.
_SHAPES = {
    "CALL": re.compile(rf"^\s*CALL\s+(?P<tool>{_NAME})(?:\s+(?P<input>\{{.*\}}))?\s*$"),
    "LOOP": re.compile(rf"^\s*LOOP\s+(?P<tool>{_NAME})(?:\s+(?P<input>\{{.*\}}))?\s*$"),
    "USE_ALL": re.compile(r"^\s*USE\s+ALL\s+TOOLS(?:\s+in\s+parallel)?\.?\s*$"),
    "USE": re.compile(rf"^\s*USE\s+TOOLS:?\s+(?P<names>{_NAMES})\s*$"),
    "CHAIN": re.compile(rf"^\s*CHAIN\s+(?P<names>{_NAMES})\s*$"),
    "LONG": re.compile(r"^\s*LONG\s+(?P<n>\d+)\s*$"),
    "SAY": re.compile(r"^\s*SAY(?:\s+(?P<text>.*?))?\s*$"),
    "FAIL": re.compile(rf"^\s*FAIL\s+(?P<status>[45]\d\d)(?:\s+(?P<wait>{_NUMBER}))?\s*$"),
    "SLEEP": re.compile(rf"^\s*SLEEP\s+(?P<s>{_NUMBER})\s*$"),
}
_IN_PARALLEL = re.compile(r"\s+in\s+parallel\.?$|\.$")


@dataclass(frozen=True)
class ToolDirective:
    """A tool named in a directive, with its input (None: build it from the schema)."""

    name: str
    input: dict[str, Any] | None = None


@dataclass
class Directives:
    """What an instruction asks of the mock model. ``content`` is the instruction's other lines."""

    calls: list[ToolDirective] = field(default_factory=list)
    use_all_tools: bool = False
    chain: list[str] = field(default_factory=list)
    loop: ToolDirective | None = None
    long_tokens: int | None = None
    say: str | None = None
    fail_status: int | None = None
    fail_retry_after_s: float | None = None
    sleep_s: float = 0.0
    content: str = ""

    @property
    def wants_tools(self) -> bool:
        """True when the instruction asks for at least one tool call."""
        return bool(self.calls or self.use_all_tools or self.chain or self.loop)


def _tool_call(found: re.Match[str], keyword: str) -> ToolDirective:
    tool, raw = found.group("tool"), found.group("input")
    if raw is None:
        return ToolDirective(tool, {})
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise MockRequestInvalid(
            f"mock directive {keyword} {tool}: input is not JSON ({exc.msg})", status_code=400
        ) from None
    if not isinstance(value, dict):
        raise MockRequestInvalid(f"mock directive {keyword} {tool}: input must be an object", status_code=400)
    return ToolDirective(tool, value)


def _names(found: re.Match[str]) -> list[str]:
    return [n.strip() for n in _IN_PARALLEL.sub("", found.group("names")).split(",")]


def _apply(directives: Directives, kind: str, found: re.Match[str]) -> None:
    if kind == "CALL":
        directives.calls.append(_tool_call(found, kind))
    elif kind == "LOOP":
        directives.loop = _tool_call(found, kind)
    elif kind == "USE_ALL":
        directives.use_all_tools = True
    elif kind == "USE":
        directives.calls.extend(ToolDirective(name) for name in _names(found))
    elif kind == "CHAIN":
        directives.chain = _names(found)
    elif kind == "LONG":
        directives.long_tokens = int(found.group("n"))
    elif kind == "SAY":
        directives.say = found.group("text") or ""
    elif kind == "FAIL":
        directives.fail_status = int(found.group("status"))
        wait = found.group("wait")
        directives.fail_retry_after_s = float(wait) if wait is not None else None
    elif kind == "SLEEP":
        directives.sleep_s = float(found.group("s"))


def parse_directives(text: str) -> Directives:
    """Split ``text`` into its directives and its content.

    ``MockRequestInvalid`` (status 400) when a ``CALL`` or ``LOOP`` input is not a JSON object.
    """
    directives = Directives()
    content: list[str] = []
    for line in text.splitlines():
        for kind, shape in _SHAPES.items():
            found = shape.match(line)
            if found is not None:
                _apply(directives, kind, found)
                break
        else:
            content.append(line)
    directives.content = "\n".join(content).strip()
    return directives
