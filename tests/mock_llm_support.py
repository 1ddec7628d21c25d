"""Helpers shared by the mock Messages API tests: the key, model, tool schemas and SDK calls."""

from __future__ import annotations

from typing import Any

import anthropic

from agentfleet.mock_llm import MockMessagesServer

KEY = "sk-mock-test"
MODEL = "claude-haiku-4-5"
LOOKUP = {
    "name": "lookup",
    "description": "Look a term up.",
    "input_schema": {
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    },
}
WEATHER = {
    "name": "weather",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    },
}


def sdk(server: MockMessagesServer, *, key: str = KEY, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, **options)


def ask(client: anthropic.Anthropic, text: str, **options: Any) -> anthropic.types.Message:
    options.setdefault("max_tokens", 256)
    return client.messages.create(model=MODEL, messages=[{"role": "user", "content": text}], **options)
