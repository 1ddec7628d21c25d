"""The Messages API's wire shapes, as the mock server speaks them.

Request validation (``validate_request`` raises ``MockRequestInvalid`` with status 400, in the words
of Anthropic's own messages where it has them), the message and error bodies, and the
server-sent events of a streamed message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from agentfleet.errors import MockRequestInvalid

__all__ = [
    "ERROR_TYPES",
    "error_body",
    "error_type_for",
    "message_body",
    "sse_error",
    "sse_events",
    "validate_request",
]

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
_ROLES = ("user", "assistant")


def error_type_for(status: int) -> str:
    """Anthropic's ``error.type`` for an HTTP status."""
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_body(
    status: int,
    message: str,
    *,
    request_id: str,
    error_type: str | None = None,
    error_code: str | None = None,
) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"[, "details"]}, "request_id"}``."""
    error: dict[str, Any] = {"type": error_type or error_type_for(status), "message": message}
    if error_code:
        error["details"] = {"error_code": error_code}
    return {"type": "error", "error": error, "request_id": request_id}


def _invalid(message: str) -> MockRequestInvalid:
    return MockRequestInvalid(message, status_code=400)


def _check_content(index: int, message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return []
    if not isinstance(content, list):
        raise _invalid(f"messages.{index}.content: Input should be a valid string or list")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _invalid(f"messages.{index}.content.{j}: a content block needs a 'type'")
        if block["type"] == "text" and not isinstance(block.get("text"), str):
            raise _invalid(f"messages.{index}.content.{j}.text: Field required")
        if block["type"] == "tool_use" and not (
            isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
        ):
            raise _invalid(f"messages.{index}.content.{j}: tool_use needs an 'id' and a 'name'")
        if block["type"] == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise _invalid(f"messages.{index}.content.{j}.tool_use_id: Field required")
    return content


def _ids(blocks: list[Mapping[str, Any]], kind: str, key: str) -> list[str]:
    return [str(b[key]) for b in blocks if b.get("type") == kind]


def _check_tool_pairs(messages: list[Any]) -> None:
    """Every ``tool_use`` is answered in the next message and every ``tool_result`` answers one."""
    blocks = [_check_content(i, m) for i, m in enumerate(messages)]
    for i, message in enumerate(messages):
        uses = _ids(blocks[i], "tool_use", "id") if message["role"] == "assistant" else []
        following = messages[i + 1] if i + 1 < len(messages) else None
        answered = _ids(blocks[i + 1], "tool_result", "tool_use_id") if following else []
        missing = [u for u in uses if u not in answered]
        if missing:
            raise _invalid(
                f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        if message["role"] == "user":
            previous = _ids(blocks[i - 1], "tool_use", "id") if i > 0 else []
            unexpected = [r for r in _ids(blocks[i], "tool_result", "tool_use_id") if r not in previous]
            if unexpected:
                raise _invalid(
                    f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {', '.join(unexpected)}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )


def _check_tools(tools: Any) -> None:
    if not isinstance(tools, list):
        raise _invalid("tools: Input should be a valid list")
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _invalid(f"tools.{i}: Input should be an object")
        name = tool.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise _invalid(f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'")
        if name in seen:
            raise _invalid(f"tools: Tool names must be unique, {name!r} is repeated")
        seen.add(name)
        is_custom = tool.get("type") in (None, "custom")
        if is_custom and not isinstance(tool.get("input_schema"), dict):
            raise _invalid(f"tools.{i}.input_schema: Field required")


def validate_request(body: Any, *, counting: bool = False) -> None:
    """``MockRequestInvalid`` (400) unless ``body`` is a well-formed ``POST /v1/messages`` request.

    ``counting``: the body is for ``/v1/messages/count_tokens``, which takes no ``max_tokens``.
    """
    if not isinstance(body, dict):
        raise _invalid("The request body is not a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("model: Field required")
    max_tokens = body.get("max_tokens")
    if not counting and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise _invalid("max_tokens: Field required, an integer of at least 1")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _invalid("messages: at least one message is required")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise _invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
    _check_tool_pairs(messages)
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise _invalid("system: Input should be a valid string or list of text blocks")
    if body.get("tools") is not None:
        _check_tools(body["tools"])
    stops = body.get("stop_sequences")
    if stops is not None and not (isinstance(stops, list) and all(isinstance(s, str) for s in stops)):
        raise _invalid("stop_sequences: Input should be a list of strings")
    if not isinstance(body.get("stream", False), bool):
        raise _invalid("stream: Input should be a valid boolean")


def message_body(
    *,
    message_id: str,
    model: str,
    content: list[dict[str, Any]],
    stop_reason: str,
    stop_sequence: str | None,
    usage: Mapping[str, int],
) -> dict[str, Any]:
    """A ``Message`` as ``POST /v1/messages`` returns it."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": dict(usage),
    }


def _event(name: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def sse_events(message: Mapping[str, Any], *, chunk_chars: int = 16) -> Iterator[bytes]:
    """The server-sent events of ``message`` streamed: text in ``chunk_chars`` pieces."""
    usage = dict(message["usage"])
    start_usage = {**usage, "output_tokens": min(1, usage.get("output_tokens", 0))}
    head = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": start_usage,
    }
    yield _event("message_start", {"type": "message_start", "message": head})
    yield _event("ping", {"type": "ping"})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            text = block["text"]
            deltas = [
                {"type": "text_delta", "text": text[i : i + chunk_chars]}
                for i in range(0, len(text), chunk_chars)
            ]
        else:
            opening = {**block, "input": {}}
            raw = json.dumps(block.get("input", {}))
            deltas = [
                {"type": "input_json_delta", "partial_json": raw[i : i + chunk_chars]}
                for i in range(0, len(raw), chunk_chars)
            ]
        yield _event(
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": opening},
        )
        for delta in deltas:
            yield _event(
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": delta},
            )
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": message["stop_reason"],
                "stop_sequence": message["stop_sequence"],
            },
            "usage": {"output_tokens": usage.get("output_tokens", 0)},
        },
    )
    yield _event("message_stop", {"type": "message_stop"})


def sse_error(body: Mapping[str, Any]) -> bytes:
    """An ``error`` event carrying an error body (see ``error_body``)."""
    return _event("error", body)
