"""The mock Messages API's errors, limits, latency, control endpoints and command line,
through the official Anthropic SDK over real HTTP."""

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
from mock_llm_support import KEY, MODEL, ask, sdk

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
from agentfleet.llm.anthropic_errors import map_anthropic_error
from agentfleet.llm.pricing import cost_usd
from agentfleet.mock_llm.server import MockMessagesServer, serve


@pytest.fixture
def server() -> Iterator[MockMessagesServer]:
    with MockMessagesServer(api_key=KEY) as mock:
        yield mock


@pytest.fixture
def client(server: MockMessagesServer) -> Iterator[anthropic.Anthropic]:
    with sdk(server) as c:
        yield c


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
    # Nagle's algorithm meeting a delayed ACK would add about 40 ms to each reply, every one: so
    # a quarter of them well under that shows it does not (the rest may wait for a busy CPU).
    assert statistics.quantiles(durations, n=4)[0] < 0.02, sorted(durations)


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
    assert max_in_flight >= 150, f"only {max_in_flight} requests were in flight at once"
    # Served one at a time they would take 200 s, ten at a time 20 s; on an idle machine the
    # burst takes 1.1-1.5 s, on a busy one the 400 sockets' own work can take several more.
    assert elapsed < 15.0, f"200 requests at 1 s latency took {elapsed:.2f} s"


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
