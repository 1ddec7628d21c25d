"""The mock model: a deterministic, rule-based stand-in for Claude behind the mock Messages API.

Given a validated Messages API request body, ``MockModel.respond`` returns the reply's content
blocks, ``stop_reason`` and ``usage``, or a ``MockFailure`` the server turns into an HTTP error.
What it answers, in order:

1. the directives of the instruction (``agentfleet.mock_llm.directives``): scripted tool calls,
   loops, long outputs, fixed text, failures, extra latency;
2. when the latest user message returns ``tool_result`` blocks: the next call of a ``CHAIN`` or
   ``LOOP``, else a text that sums the results up;
3. a unified diff: code-review findings as JSON, ``{"findings": [{"file", "line", "severity",
   "rule", "message"}, ...]}`` (``agentfleet.mock_llm.review``);
4. anything else: a sentiment label (``agentfleet.mock_llm.sentiment``). When the prompt
   quotes its text after ``Text:``, only the quote is read. When the prompt names two or more
   of the labels, only those are answered, in the prompt's letter case (``POSITIVE``).

Token counts are estimates (``mock_llm/tokens.py``): ``ceil(characters / 4)`` of the text the
model reads or writes (system prompt, text blocks, tool names and JSON inputs, tool results,
tool definitions); an image or document block counts ``NON_TEXT_BLOCK_TOKENS``. Input and
output counts are at least 1. Output stops at ``max_tokens`` (text is cut, tool calls that do
not fit are dropped, ``stop_reason`` is ``max_tokens``) and at the first of ``stop_sequences``.

Prompt caching is simulated (``mock_llm/prompt_cache.py``): the request's prefix up to its
last ``cache_control`` mark is ``cache_creation_input_tokens`` the first time this model
instance sees it and ``cache_read_input_tokens`` when it comes again within ``CACHE_TTL_S`` of
its last use; ``input_tokens`` counts the rest. Only that exact prefix is looked up, not
shorter ones.

Nothing is random: tool-use ids are hashes of the seed and the conversation.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfleet.errors import MockRequestInvalid
from agentfleet.mock_llm.directives import Directives, ToolDirective, parse_directives
from agentfleet.mock_llm.prompt_cache import CACHE_TTL_S, PromptCache
from agentfleet.mock_llm.review import find_issues, is_unified_diff
from agentfleet.mock_llm.sentiment import LABELS, score_sentiment
from agentfleet.mock_llm.tokens import (
    CHARS_PER_TOKEN,
    NON_TEXT_BLOCK_TOKENS,
    blocks_of,
    counted_chars,
    has_block,
    input_pieces,
    output_tokens,
    text_of,
    tokens_of_chars,
)

__all__ = [
    "CACHE_TTL_S",
    "CHARS_PER_TOKEN",
    "NON_TEXT_BLOCK_TOKENS",
    "MockFailure",
    "MockModel",
    "MockReply",
    "tokens_of_chars",
]

_FILLER = "The quick brown fox jumps over the lazy dog while the fleet keeps counting tokens. "
_RESULT_EXCERPT_CHARS = 200


@dataclass(frozen=True)
class MockReply:
    """A successful reply: content blocks as JSON dicts, why it stopped, token counts.

    ``delay_s`` is extra latency, in seconds, that a ``SLEEP`` directive asked for.
    """

    content: list[dict[str, Any]]
    stop_reason: str
    usage: dict[str, int]
    stop_sequence: str | None = None
    delay_s: float = 0.0


@dataclass(frozen=True)
class MockFailure:
    """An HTTP error the prompt asked for (``FAIL``); ``retry_after_s`` in seconds, if any."""

    status: int
    message: str
    retry_after_s: float | None = None


@dataclass
class _Output:
    blocks: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = "end_turn"


def _value_for(schema: Mapping[str, Any], sample: str) -> Any:
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return _input_from_schema(schema, sample)
    return sample


def _input_from_schema(schema: Mapping[str, Any], sample: str) -> dict[str, Any]:
    """An input that satisfies ``schema``'s required properties, strings filled with ``sample``."""
    properties = schema.get("properties") or {}
    return {name: _value_for(properties.get(name) or {}, sample) for name in schema.get("required") or []}


_QUOTED_TEXT = re.compile(r"(?is)\btext\s*:\s*(?P<quote>['\"])(?P<body>.*)(?P=quote)")
_UNQUOTED_TEXT = re.compile(r"(?is)\btext\s*:\s*(?P<body>.+)$")


def _split_sentiment_prompt(prompt: str) -> tuple[str, str]:
    """``(text to label, instruction around it)``."""
    for pattern in (_QUOTED_TEXT, _UNQUOTED_TEXT):
        found = pattern.search(prompt)
        if found:
            body = found.group("body").strip()
            return body, prompt[: found.start()] + prompt[found.end() :]
    return prompt, ""


def _answer_label(text: str, instruction: str) -> str:
    score = score_sentiment(text)
    offered: dict[str, str] = {}
    for found in re.finditer(r"(?i)\b(" + "|".join(LABELS) + r")\b", instruction):
        offered.setdefault(found.group(0).lower(), found.group(0))
    label: str = score.label
    if len(offered) >= 2 and label not in offered:
        # The prompt did not offer this label: take the stronger side, else neutral.
        p, n = score.positive, score.negative
        label = "positive" if p > n else "negative" if n > p else "neutral"
        if label not in offered:
            label = next(iter(offered))
    spelled = offered.get(label)
    if spelled is None:
        return label
    if spelled.isupper():
        return label.upper()
    return label.capitalize() if spelled[0].isupper() else label


class MockModel:
    """The rule-based model. Thread-safe; an instance remembers the prompt prefixes it cached.

    ``seed`` changes the tool-use ids, nothing else. ``clock`` (seconds) ages cached prefixes.
    """

    def __init__(self, *, seed: int = 0, clock: Callable[[], float] = time.monotonic) -> None:
        self.seed = seed
        self._cache = PromptCache(clock)

    def count_input_tokens(self, request: Mapping[str, Any]) -> int:
        """All input tokens of ``request`` (cached or not), as ``/v1/messages/count_tokens``."""
        return max(1, tokens_of_chars(sum(c for _, c, _ in input_pieces(request))))

    # Replies ------------------------------------------------------------------------------

    def respond(self, request: Mapping[str, Any]) -> MockReply | MockFailure:
        """The reply to a validated request body; ``MockRequestInvalid`` when a directive cannot apply."""
        messages: list[Mapping[str, Any]] = list(request.get("messages") or [])
        at = self._instruction_index(messages)
        directives = parse_directives(text_of(messages[at].get("content")) if at >= 0 else "")
        if directives.fail_status is not None:
            return MockFailure(
                directives.fail_status,
                f"failure requested by the prompt (FAIL {directives.fail_status})",
                directives.fail_retry_after_s,
            )
        answering_tools = bool(messages) and has_block(messages[-1], "tool_result")
        if answering_tools:
            output = self._after_tool_results(request, messages, at, directives)
        else:
            output = self._first_answer(request, directives)
        blocks, stop_reason, stop_sequence = self._limit(
            output, int(request.get("max_tokens", 1)), request.get("stop_sequences") or []
        )
        usage = self._cache.usage(request)
        usage["output_tokens"] = max(1, output_tokens(blocks))
        return MockReply(blocks, stop_reason, usage, stop_sequence, directives.sleep_s)

    @staticmethod
    def _instruction_index(messages: Sequence[Mapping[str, Any]]) -> int:
        for i in range(len(messages) - 1, -1, -1):
            message = messages[i]
            if (
                message.get("role") == "user"
                and text_of(message.get("content"))
                and not has_block(message, "tool_result")
            ):
                return i
        return -1

    def _tool_use(self, request: Mapping[str, Any], calls: Sequence[ToolDirective], sample: str) -> _Output:
        offered = {str(t.get("name")): t for t in request.get("tools") or [] if isinstance(t, dict)}
        missing = [c.name for c in calls if c.name not in offered]
        if missing:
            names = ", ".join(sorted(offered)) or "none"
            raise MockRequestInvalid(
                f"mock directive names tool(s) {', '.join(missing)} that the request does not "
                f"offer (offered: {names})",
                status_code=400,
            )
        conversation = json.dumps(request.get("messages"), sort_keys=True, default=str)
        blocks: list[dict[str, Any]] = [
            {"type": "text", "text": "Calling " + ", ".join(c.name for c in calls) + "."}
        ]
        for index, call in enumerate(calls):
            schema = offered[call.name].get("input_schema") or {}
            digest = hashlib.sha256(f"{self.seed}|{conversation}|{index}".encode()).hexdigest()
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_mock{digest[:20]}",
                    "name": call.name,
                    "input": call.input if call.input is not None else _input_from_schema(schema, sample),
                }
            )
        return _Output(blocks, "tool_use")

    def _first_answer(self, request: Mapping[str, Any], directives: Directives) -> _Output:
        sample = directives.content.splitlines()[0][:100] if directives.content else "test"
        if directives.wants_tools:
            if directives.loop is not None:
                calls = [directives.loop]
            elif directives.chain:
                calls = [ToolDirective(directives.chain[0])]
            elif directives.use_all_tools:
                calls = [ToolDirective(str(t.get("name"))) for t in request.get("tools") or []]
            else:
                calls = directives.calls
            return self._tool_use(request, calls, sample)
        if directives.say is not None:
            return _Output([{"type": "text", "text": directives.say}])
        if directives.long_tokens is not None:
            chars = directives.long_tokens * CHARS_PER_TOKEN
            filler = (_FILLER * (chars // len(_FILLER) + 1))[:chars]
            return _Output([{"type": "text", "text": filler}])
        system = text_of(request.get("system"))
        prompt = directives.content
        if is_unified_diff(prompt):
            findings = [f.as_dict() for f in find_issues(prompt)]
            return _Output([{"type": "text", "text": json.dumps({"findings": findings})}])
        text, instruction = _split_sentiment_prompt(prompt)
        return _Output([{"type": "text", "text": _answer_label(text, instruction + "\n" + system)}])

    def _after_tool_results(
        self,
        request: Mapping[str, Any],
        messages: Sequence[Mapping[str, Any]],
        at: int,
        directives: Directives,
    ) -> _Output:
        sample = directives.content.splitlines()[0][:100] if directives.content else "test"
        if directives.loop is not None:
            return self._tool_use(request, [directives.loop], sample)
        rounds = sum(
            1 for m in messages[at + 1 :] if m.get("role") == "assistant" and has_block(m, "tool_use")
        )
        if rounds < len(directives.chain):
            return self._tool_use(request, [ToolDirective(directives.chain[rounds])], sample)
        return _Output([{"type": "text", "text": self._summary(messages)}])

    @staticmethod
    def _summary(messages: Sequence[Mapping[str, Any]]) -> str:
        names: dict[str, str] = {}
        for message in messages:
            for block in blocks_of(message):
                if block.get("type") == "tool_use":
                    names[str(block.get("id"))] = str(block.get("name"))
        parts = []
        for block in blocks_of(messages[-1]):
            if block.get("type") != "tool_result":
                continue
            content = block.get("content", "")
            text = content if isinstance(content, str) else text_of(content)
            text = " ".join(text.split())[:_RESULT_EXCERPT_CHARS]
            name = names.get(str(block.get("tool_use_id")), "unknown tool")
            parts.append(f"{name} failed: {text}" if block.get("is_error") else f"{name}: {text}")
        return f"Summary of {len(parts)} tool result(s). " + "; ".join(parts)

    @staticmethod
    def _limit(
        output: _Output, max_tokens: int, stop_sequences: Sequence[str]
    ) -> tuple[list[dict[str, Any]], str, str | None]:
        """Cut ``output`` at the first stop sequence and at ``max_tokens``."""
        budget = max_tokens * CHARS_PER_TOKEN
        kept: list[dict[str, Any]] = []
        for block in output.blocks:
            if block["type"] == "text":
                text = block["text"]
                hits = [(text.find(s), s) for s in stop_sequences if s and s in text]
                if hits:
                    cut, sequence = min(hits)
                    if cut <= budget:
                        return (
                            [*kept, {"type": "text", "text": text[:cut]}],
                            "stop_sequence",
                            sequence,
                        )
                if len(text) > budget:
                    return [*kept, {"type": "text", "text": text[:budget]}], "max_tokens", None
                budget -= len(text)
                kept.append(block)
            else:
                cost = counted_chars(block)
                if cost > budget:
                    return kept, "max_tokens", None
                budget -= cost
                kept.append(block)
        return kept, output.stop_reason, None
