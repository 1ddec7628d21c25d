"""The official Anthropic SDK against the mock Messages API, over real HTTP on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from mock_llm_support import KEY, LOOKUP, MODEL, WEATHER, ask, sdk

from agentfleet.errors import (
    BadRequest,
)
from agentfleet.llm.anthropic_errors import map_anthropic_error
from agentfleet.mock_llm import MockMessagesServer


@pytest.fixture
def server() -> Iterator[MockMessagesServer]:
    with MockMessagesServer(api_key=KEY) as mock:
        yield mock


@pytest.fixture
def client(server: MockMessagesServer) -> Iterator[anthropic.Anthropic]:
    with sdk(server) as c:
        yield c


# Replies -------------------------------------------------------------------------------------


def test_text_reply_carries_ids_and_usage(client: anthropic.Anthropic) -> None:
    message = ask(client, "Classify: 'Absolutely love it, works great.'", max_tokens=16)

    assert message.type == "message"
    assert message.role == "assistant"
    assert message.model == MODEL
    assert message.id.startswith("msg_")
    assert message.stop_reason == "end_turn"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "positive"
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens == 2  # "positive": 8 characters, 4 a token
    assert message.usage.cache_creation_input_tokens == 0
    assert message.usage.cache_read_input_tokens == 0


def test_quickstart_style_prompt_gets_the_label_in_the_prompts_case(
    client: anthropic.Anthropic,
) -> None:
    prompt = (
        "Classify this text as POSITIVE, NEUTRAL, or NEGATIVE. Return only the label. "
        "Text: 'The hinge snapped on day three, total junk.'"
    )
    assert ask(client, prompt, max_tokens=16).content[0].text == "NEGATIVE"


def test_request_id_and_ratelimit_headers_are_sent() -> None:
    with (
        MockMessagesServer(requests_per_min=60, input_tokens_per_min=10_000) as server,
        sdk(server) as client,
    ):
        raw = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hello"}]
        )
    headers = raw.headers
    assert headers["request-id"].startswith("req_")
    assert raw.parse().id.startswith("msg_")
    assert headers["anthropic-ratelimit-requests-limit"] == "60"
    assert headers["anthropic-ratelimit-requests-remaining"] == "59"
    assert headers["anthropic-ratelimit-input-tokens-limit"] == "10000"
    assert int(headers["anthropic-ratelimit-input-tokens-remaining"]) < 10_000
    for axis in ("requests", "input-tokens", "output-tokens"):
        assert headers[f"anthropic-ratelimit-{axis}-reset"].endswith("Z")
        assert f"anthropic-ratelimit-{axis}-remaining" in headers


def test_tool_use_round_trip_ends_in_a_summary(client: anthropic.Anthropic) -> None:
    messages: list[Any] = [{"role": "user", "content": 'CALL lookup {"q": "celery chords"}'}]
    first = client.messages.create(model=MODEL, max_tokens=256, tools=[LOOKUP], messages=messages)

    assert first.stop_reason == "tool_use"
    uses = [b for b in first.content if b.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [("lookup", {"q": "celery chords"})]
    assert uses[0].id.startswith("toolu_")

    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "a group + callback"}],
        },
    ]
    final = client.messages.create(model=MODEL, max_tokens=256, tools=[LOOKUP], messages=messages)

    assert final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["text"]
    assert "lookup: a group + callback" in final.content[0].text


def test_several_tool_use_blocks_arrive_in_one_response(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=256,
        tools=[LOOKUP, WEATHER],
        messages=[{"role": "user", "content": "USE TOOLS lookup, weather in parallel\nOslo"}],
    )

    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use"
    assert [u.name for u in uses] == ["lookup", "weather"]
    assert uses[0].input == {"q": "Oslo"}
    assert uses[1].input == {"city": "Oslo", "days": 1}
    assert len({u.id for u in uses}) == 2


def test_a_tool_result_without_its_tool_use_is_a_400(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model=MODEL,
            max_tokens=16,
            tools=[LOOKUP],
            messages=[
                {"role": "user", "content": "CALL lookup"},
                {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}],
                },
            ],
        )
    assert caught.value.type == "invalid_request_error"
    assert isinstance(map_anthropic_error(caught.value), BadRequest)


def test_a_malformed_request_is_a_400(server: MockMessagesServer) -> None:
    response = httpx.post(
        f"{server.url}/v1/messages",
        headers={"x-api-key": KEY},
        json={"model": MODEL, "messages": []},
    )
    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_an_oversized_body_is_a_413() -> None:
    with (
        MockMessagesServer(max_body_bytes=1_000) as server,
        sdk(server) as client,
        pytest.raises(anthropic.RequestTooLargeError) as caught,
    ):
        ask(client, "x" * 5_000)
    assert caught.value.type == "request_too_large"
    assert isinstance(map_anthropic_error(caught.value), BadRequest)


def test_refused_requests_leave_the_connection_usable(server: MockMessagesServer) -> None:
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=server.url) as http:
        statuses = [
            http.post("/v1/messages", json=body).status_code,
            http.post("/v1/messages", json=body, headers={"x-api-key": "nope"}).status_code,
            http.post("/v1/messages", content=b"{not json", headers={"x-api-key": KEY}).status_code,
            http.post("/v1/nothing", json=body, headers={"x-api-key": KEY}).status_code,
            http.post("/v1/messages", json=body, headers={"x-api-key": KEY}).status_code,
        ]
    assert statuses == [401, 401, 400, 404, 200]


def test_max_tokens_cuts_the_reply(client: anthropic.Anthropic) -> None:
    message = ask(client, "LONG 500", max_tokens=50)

    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 50
    assert len(message.content[0].text) == 200


def test_prompt_caching_writes_then_reads(client: anthropic.Anthropic) -> None:
    system = [{"type": "text", "text": "x" * 4000, "cache_control": {"type": "ephemeral"}}]
    first = ask(client, "hello", system=system)
    second = ask(client, "hello again", system=system)

    assert first.usage.cache_creation_input_tokens == 1000
    assert first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_creation_input_tokens == 0
    assert second.usage.cache_read_input_tokens == 1000
    assert second.usage.input_tokens == 3  # "hello again": 11 characters


def test_count_tokens_endpoint(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "x" * 40}])
    assert counted.input_tokens == 10


def test_streamed_text_and_tool_use(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL,
        max_tokens=256,
        messages=[{"role": "user", "content": "SAY streamed text arrives in several chunks"}],
    ) as stream:
        pieces = list(stream.text_stream)
        text_message = stream.get_final_message()
    with client.messages.stream(
        model=MODEL,
        max_tokens=256,
        tools=[LOOKUP],
        messages=[{"role": "user", "content": 'CALL lookup {"q": "sse"}'}],
    ) as stream:
        tool_message = stream.get_final_message()

    assert len(pieces) > 1
    assert "".join(pieces) == "streamed text arrives in several chunks"
    assert text_message.stop_reason == "end_turn"
    assert text_message.usage.output_tokens == 10
    assert tool_message.stop_reason == "tool_use"
    assert tool_message.content[-1].type == "tool_use"
    assert tool_message.content[-1].input == {"q": "sse"}
