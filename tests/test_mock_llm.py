"""The official Anthropic SDK against the mock Messages API, over real HTTP on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from agentfleet.errors import (
    AuthError,
    BadRequest,
    ConnectionFailed,
    DownstreamError,
    Overloaded,
    RateLimited,
    SpendLimitReached,
    TaskTimeout,
)
from agentfleet.llm.errors import map_anthropic_error
from agentfleet.llm.mock_server import MockMessagesServer, serve
from agentfleet.llm.pricing import cost_usd

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


@pytest.fixture
def server() -> Iterator[MockMessagesServer]:
    with MockMessagesServer(api_key=KEY) as mock:
        yield mock


def sdk(server: MockMessagesServer, *, key: str = KEY, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, **options)


@pytest.fixture
def client(server: MockMessagesServer) -> Iterator[anthropic.Anthropic]:
    with sdk(server) as c:
        yield c


def ask(client: anthropic.Anthropic, text: str, **options: Any) -> anthropic.types.Message:
    options.setdefault("max_tokens", 256)
    return client.messages.create(model=MODEL, messages=[{"role": "user", "content": text}], **options)


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


# Errors ----------------------------------------------------------------------------------


def test_scripted_429_carries_retry_after_and_maps_to_rate_limited(
    server: MockMessagesServer, client: anthropic.Anthropic
) -> None:
    server.script([{"status": 429, "retry_after_s": 2}, 200])

    with pytest.raises(anthropic.RateLimitError) as caught:
        ask(client, "hello")
    after = ask(client, "hello")

    assert caught.value.response.headers["retry-after"] == "2"
    mapped = map_anthropic_error(caught.value)
    assert isinstance(mapped, RateLimited)
    assert mapped.retry_after_s == 2
    assert mapped.status_code == 429
    assert mapped.downstream == f"anthropic:{MODEL}"
    assert after.stop_reason == "end_turn"
    assert [r.status for r in server.requests] == [429, 200]
    assert [r.sdk_retry_count for r in server.requests] == [0, 0]


def test_scripted_spend_limit_maps_to_spend_limit_reached(
    server: MockMessagesServer, client: anthropic.Anthropic
) -> None:
    server.script([{"status": 429, "error_code": "enforced_spend_limit_reached"}])
    with pytest.raises(anthropic.RateLimitError) as caught:
        ask(client, "hello")
    assert isinstance(map_anthropic_error(caught.value), SpendLimitReached)


@pytest.mark.parametrize(
    ("status", "sdk_error", "fleet_error"),
    [
        (529, anthropic.OverloadedError, Overloaded),
        (500, anthropic.InternalServerError, DownstreamError),
    ],
)
def test_injected_errors_surface_as_sdk_and_fleet_errors(
    status: int, sdk_error: type[Exception], fleet_error: type[Exception]
) -> None:
    with MockMessagesServer(error_rates={status: 1.0}) as server, sdk(server) as client:
        with pytest.raises(sdk_error) as caught:
            ask(client, "hello")
        assert isinstance(map_anthropic_error(caught.value), fleet_error)
        assert server.requests[0].status == status


def test_error_rates_inject_roughly_their_share() -> None:
    with (
        MockMessagesServer(error_rates={529: 0.2, 500: 0.1}, seed=7) as server,
        httpx.Client(base_url=server.url, headers={"x-api-key": KEY}) as http,
    ):
        body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
        statuses = [http.post("/v1/messages", json=body).status_code for _ in range(300)]
    assert 30 <= statuses.count(529) <= 90
    assert 10 <= statuses.count(500) <= 50
    assert statuses.count(200) == 300 - statuses.count(529) - statuses.count(500)


def test_a_wrong_key_is_401_and_maps_to_auth_error(server: MockMessagesServer) -> None:
    with (
        sdk(server, key="sk-wrong") as client,
        pytest.raises(anthropic.AuthenticationError) as caught,
    ):
        ask(client, "hello")
    assert caught.value.type == "authentication_error"
    assert isinstance(map_anthropic_error(caught.value), AuthError)
    assert server.requests[0].api_key == "sk-wrong"
    assert server.requests[0].status == 401


def test_an_unserved_model_is_404() -> None:
    with (
        MockMessagesServer(models=["claude-haiku-4-5"]) as server,
        sdk(server) as client,
        pytest.raises(anthropic.NotFoundError) as caught,
    ):
        client.messages.create(
            model="claude-nope-1", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    mapped = map_anthropic_error(caught.value)
    assert isinstance(mapped, BadRequest)
    assert mapped.downstream == "anthropic:claude-nope-1"


def test_requests_per_minute_limit_answers_429_once_exceeded() -> None:
    with MockMessagesServer(requests_per_min=3) as server, sdk(server) as client:
        for _ in range(3):
            ask(client, "hello")
        with pytest.raises(anthropic.RateLimitError) as caught:
            ask(client, "hello")

    headers = caught.value.response.headers
    # One request comes back every 20 s at 3 a minute.
    assert 15 <= int(headers["retry-after"]) <= 20
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert map_anthropic_error(caught.value).retry_after_s == int(headers["retry-after"])


def test_input_tokens_per_minute_limit_answers_429_once_exceeded() -> None:
    text = "x" * 200  # 50 input tokens
    with MockMessagesServer(input_tokens_per_min=120) as server, sdk(server) as client:
        ask(client, text)
        ask(client, text)
        with pytest.raises(anthropic.RateLimitError):
            ask(client, text)
        assert [r.status for r in server.requests] == [200, 200, 429]


def test_fail_directive_answers_that_error_every_time(client: anthropic.Anthropic) -> None:
    for _ in range(2):
        with pytest.raises(anthropic.InternalServerError) as caught:
            ask(client, "FAIL 503 4\nthis item always fails")
        assert caught.value.status_code == 503
        assert map_anthropic_error(caught.value).retry_after_s == 4


def test_an_error_inside_a_stream_maps_by_its_type(
    server: MockMessagesServer, client: anthropic.Anthropic
) -> None:
    server.script([{"status": 529, "in_stream": True}])
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        client.messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "hello"}]
        ) as stream,
    ):
        stream.get_final_message()
    assert caught.value.status_code == 200
    assert isinstance(map_anthropic_error(caught.value), Overloaded)


def test_a_client_timeout_maps_to_task_timeout(server: MockMessagesServer) -> None:
    with sdk(server, timeout=0.2) as client, pytest.raises(anthropic.APITimeoutError) as caught:
        ask(client, "SLEEP 2\nhello")
    assert isinstance(map_anthropic_error(caught.value, model=MODEL), TaskTimeout)


def test_a_stopped_server_maps_to_connection_failed() -> None:
    server = MockMessagesServer().start()
    server.stop()
    with sdk(server) as client, pytest.raises(anthropic.APIConnectionError) as caught:
        ask(client, "hello")
    assert isinstance(map_anthropic_error(caught.value), ConnectionFailed)


# Latency and concurrency -------------------------------------------------------------------


def test_latency_is_honoured() -> None:
    with MockMessagesServer(latency=0.3) as server, sdk(server) as client:
        started = time.perf_counter()
        ask(client, "hello")
        elapsed = time.perf_counter() - started
    assert 0.3 <= elapsed < 1.0
    assert server.requests[0].duration_s >= 0.3


def test_errors_do_not_wait_for_the_latency() -> None:
    with MockMessagesServer(latency=2.0, error_rates={529: 1.0}) as server, sdk(server) as client:
        started = time.perf_counter()
        with pytest.raises(anthropic.OverloadedError):
            ask(client, "hello")
        assert time.perf_counter() - started < 1.0


def test_a_reply_without_latency_is_not_held_back_by_the_network_stack(
    server: MockMessagesServer,
) -> None:
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=server.url, headers={"x-api-key": KEY}) as http:
        http.post("/v1/messages", json=body)
        durations = []
        for _ in range(20):
            started = time.perf_counter()
            http.post("/v1/messages", json=body)
            durations.append(time.perf_counter() - started)
    # Nagle's algorithm meeting a delayed ACK would add about 40 ms to each reply.
    assert statistics.median(durations) < 0.02


def test_200_concurrent_requests_at_1s_latency_are_served_in_parallel() -> None:
    body = json.dumps(
        {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()

    async def one(port: int) -> bytes:
        # A bare HTTP/1.1 client: the point is the server's concurrency, not a client's.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /v1/messages HTTP/1.1\r\nhost: mock\r\nx-api-key: k\r\n"
            b"content-type: application/json\r\nconnection: close\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        response = await reader.read()
        writer.close()
        return response.split(b" ", 2)[1]

    async def burst(port: int) -> list[bytes]:
        return await asyncio.gather(*(one(port) for _ in range(200)))

    with MockMessagesServer(latency=1.0) as server:
        started = time.perf_counter()
        statuses = asyncio.run(burst(server.port))
        elapsed = time.perf_counter() - started
        max_in_flight = server.stats()["max_in_flight"]

    assert statuses == [b"200"] * 200
    assert elapsed < 2.0, f"200 requests at 1 s latency took {elapsed:.2f} s"
    assert max_in_flight >= 150, f"only {max_in_flight} requests were in flight at once"


# Control and lifecycle ---------------------------------------------------------------------


def test_request_log_records_each_request(server: MockMessagesServer, client: anthropic.Anthropic) -> None:
    before = time.time()
    ask(client, "hello")
    record = server.requests[0]

    assert before <= record.arrived_at <= time.time()
    assert (record.model, record.status, record.api_key) == (MODEL, 200, KEY)
    assert record.request_id.startswith("req_")
    assert record.output_tokens > 0


def test_http_control_scripts_and_reports(server: MockMessagesServer, client: anthropic.Anthropic) -> None:
    with httpx.Client(base_url=server.url) as control:
        queued = control.post("/_mock/script", json={"replies": [{"status": 529}, 200]})
        assert queued.json() == {"scripted_pending": 2}
        with pytest.raises(anthropic.OverloadedError):
            ask(client, "hello")
        ask(client, "hello")
        stats = control.get("/_mock/stats").json()
        log = control.get("/_mock/requests").json()
        configured = control.post("/_mock/config", json={"latency": "uniform:0.1,0.2"}).json()
        bad = control.post("/_mock/script", json=[{"status": 99}])
        bad_limit = control.post("/_mock/config", json={"requests_per_min": "lots"})
        reset = control.post("/_mock/reset").json()

    assert stats["by_status"] == {"200": 1, "529": 1}
    assert stats["scripted_pending"] == 0
    assert [entry["status"] for entry in log] == [529, 200]
    assert configured["latency"] == "uniform:0.1,0.2"
    assert bad.status_code == 400
    assert bad_limit.status_code == 400
    assert reset["requests"] == 0


def test_stop_ends_every_server_thread_even_with_open_connections() -> None:
    server = MockMessagesServer(latency=5.0).start()
    client = sdk(server)
    ask_in_flight = threading.Thread(target=lambda: _swallow(lambda: ask(client, "hi")))
    ask_in_flight.start()
    idle = httpx.Client(base_url=server.url)
    idle.get("/_mock/stats")  # leaves a keep-alive connection open
    time.sleep(0.2)

    started = time.perf_counter()
    server.stop()

    assert time.perf_counter() - started < 2.0
    assert server.open_connections == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("mock-llm")]
    ask_in_flight.join(5)
    idle.close()
    client.close()


def _swallow(action: Any) -> None:
    with contextlib.suppress(anthropic.APIError):
        action()


def test_serve_runs_until_stopped() -> None:
    stop = threading.Event()
    ready: list[MockMessagesServer] = []
    runner = threading.Thread(
        target=serve,
        kwargs={"port": 0, "stop": stop, "on_ready": ready.append, "latency": 0.0},
    )
    runner.start()
    deadline = time.monotonic() + 5
    while not ready and time.monotonic() < deadline:
        time.sleep(0.01)
    with sdk(ready[0]) as client:
        reply = ask(client, "SAY up")
    stop.set()
    runner.join(5)

    assert reply.content[0].text == "up"
    assert not runner.is_alive()
    assert not [t for t in threading.enumerate() if t.name.startswith("mock-llm")]


def test_the_command_line_server_is_driven_over_http_and_stops_on_sigterm() -> None:
    command = [sys.executable, "-m", "agentfleet", "mock-llm", "--port", "0", "--seed", "3"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        url = banner.split(" on ", 1)[1].split()[0]
        httpx.post(f"{url}/_mock/script", json=[529]).raise_for_status()
        with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as client:
            with pytest.raises(anthropic.OverloadedError):
                ask(client, "hello")
            assert ask(client, "SAY fine").content[0].text == "fine"
        assert httpx.get(f"{url}/_mock/stats").json()["by_status"] == {"200": 1, "529": 1}
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize(
    "argv",
    [["--error-rate", "529"], ["--latency", "gaussian:1"], ["--error-rate", "529=0.7,500=0.5"]],
)
def test_the_command_line_refuses_bad_settings_in_one_line(argv: list[str]) -> None:
    command = [sys.executable, "-m", "agentfleet", "mock-llm", "--port", "0", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ")
    assert done.stderr.count("\n") == 1


def test_cost_of_a_response_is_its_usage_times_the_price_table(client: anthropic.Anthropic) -> None:
    from agentfleet.config import ModelPrice

    prices = {MODEL: ModelPrice(input_per_mtok=1.0, output_per_mtok=5.0)}
    message = ask(client, "x" * 4000, max_tokens=64)  # 1000 input tokens
    assert message.usage.input_tokens == 1000
    expected = (1000 * 1.0 + message.usage.output_tokens * 5.0) / 1_000_000
    assert cost_usd(MODEL, message.usage, prices) == pytest.approx(expected)
