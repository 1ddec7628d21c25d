"""The mock model's token estimates: ``ceil(characters / CHARS_PER_TOKEN)`` of what it reads.

What counts: the system prompt, text blocks, tool names and JSON inputs, tool results and tool
definitions; an image or document block counts ``NON_TEXT_BLOCK_TOKENS`` tokens.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CHARS_PER_TOKEN",
    "NON_TEXT_BLOCK_TOKENS",
    "blocks_of",
    "counted_chars",
    "has_block",
    "input_pieces",
    "output_tokens",
    "text_of",
    "tokens_of_chars",
]

CHARS_PER_TOKEN = 4
NON_TEXT_BLOCK_TOKENS = 1_000


def tokens_of_chars(chars: int) -> int:
    """Tokens in ``chars`` characters by the mock's rule: one per ``CHARS_PER_TOKEN``, rounded up."""
    return math.ceil(chars / CHARS_PER_TOKEN)


def text_of(content: Any) -> str:
    """The text blocks of a message's ``content`` (a string or a list of blocks), joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def blocks_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def has_block(message: Mapping[str, Any], kind: str) -> bool:
    return any(b.get("type") == kind for b in blocks_of(message))


def counted_chars(block: Mapping[str, Any]) -> int:
    kind = block.get("type")
    if kind == "text":
        return len(str(block.get("text", "")))
    if kind == "tool_use":
        return len(str(block.get("name", ""))) + len(json.dumps(block.get("input", {})))
    if kind == "tool_result":
        content = block.get("content", "")
        return len(content) if isinstance(content, str) else len(text_of(content))
    if kind in ("image", "document"):
        return NON_TEXT_BLOCK_TOKENS * CHARS_PER_TOKEN
    return len(json.dumps(block, default=str))


def input_pieces(request: Mapping[str, Any]) -> list[tuple[str, int, bool]]:
    """The request in reading order as ``(identity, characters, marked for caching)``."""
    pieces: list[tuple[str, int, bool]] = []
    for tool in request.get("tools") or []:
        text = json.dumps(tool, sort_keys=True)
        pieces.append((text, len(text), "cache_control" in tool))
    system = request.get("system")
    system_blocks = [{"type": "text", "text": system}] if isinstance(system, str) else system or []
    for block in system_blocks:
        pieces.append((json.dumps(block, sort_keys=True), counted_chars(block), "cache_control" in block))
    for message in request.get("messages") or []:
        for block in blocks_of(message):
            identity = json.dumps([message.get("role"), block], sort_keys=True, default=str)
            pieces.append((identity, counted_chars(block), "cache_control" in block))
    return pieces


def output_tokens(blocks: Sequence[Mapping[str, Any]]) -> int:
    return tokens_of_chars(sum(counted_chars(b) for b in blocks))
