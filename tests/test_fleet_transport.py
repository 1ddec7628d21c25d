"""The fleet transport in isolation: a MockTransport below it, recording collaborators around it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
import httpx2
import pytest

from agentfleet.errors import Deferred
from agentfleet.llm.anthropic import AnthropicAdapter
from agentfleet.models import TokenUsage
from agentfleet.tools.transport import CallInfo, FleetHooks, fleet_transport


@dataclass
class RecordingPermit:
    log: list[str]
    reconciled: dict[str, int | None] = field(default_factory=dict)

    def release(self) -> None:
        self.log.append("release")

    def reconcile(
        self, *, actual_input_tokens: int | None = None, actual_output_tokens: int | None = None
    ) -> None:
        self.reconciled = {"input": actual_input_tokens, "output": actual_output_tokens}
        self.log.append("reconcile")


@dataclass
class RecordingLimiter:
    log: list[str] = field(default_factory=list)
    acquired: list[dict[str, Any]] = field(default_factory=list)
    paused: list[tuple[str, float]] = field(default_factory=list)
    permits: list[RecordingPermit] = field(default_factory=list)
    refuse_with: float | None = None

    def acquire(
        self, downstream: str, *, also: Any = (), input_tokens: int = 0, output_tokens: int = 0
    ) -> Any:
        if self.refuse_with is not None:
            raise Deferred(self.refuse_with, "no slot", downstream=downstream)
        self.acquired.append(
            {"downstream": downstream, "also": tuple(also), "in": input_tokens, "out": output_tokens}
        )
        self.log.append("acquire")
        permit = RecordingPermit(self.log)
        self.permits.append(permit)
        return permit

    def pause(self, downstream: str, seconds: float) -> None:
        self.paused.append((downstream, seconds))


@dataclass
class RecordingBreaker:
    events: list[tuple[str, str]] = field(default_factory=list)

    def before(self, downstream: str) -> bool:
        self.events.append(("before", downstream))
        return False

    def release_probe(self, downstream: str) -> None:
        self.events.append(("release", downstream))

    def record_success(self, downstream: str) -> None:
        self.events.append(("success", downstream))

    def record_failure(self, downstream: str) -> None:
        self.events.append(("failure", downstream))


def _client(module: Any, handler: Any, hooks: FleetHooks) -> Any:
    inner = module.MockTransport(handler)
    return module.Client(transport=fleet_transport(module, inner, hooks))


def test_a_plain_request_is_limited_by_host_and_released_when_closed() -> None:
    limiter, breaker = RecordingLimiter(), RecordingBreaker()
    calls: list[CallInfo] = []
    hooks = FleetHooks(limiter=limiter, breaker=breaker, on_call=calls.append)
    client = _client(httpx, lambda r: httpx.Response(200, text="hello"), hooks)
    with client.stream("GET", "https://Vendor-A.example/page") as response:
        assert limiter.log == ["acquire"], "the lease is held while the body is open"
        assert response.read() == b"hello"
    assert limiter.log == ["acquire", "release"]
    assert limiter.acquired == [{"downstream": "vendor-a.example", "also": (), "in": 0, "out": 0}]
    assert breaker.events == [("before", "vendor-a.example"), ("success", "vendor-a.example")]
    assert [c.downstream for c in calls] == ["vendor-a.example"]


def test_a_429_pauses_the_downstream_for_its_retry_after_without_opening_the_circuit() -> None:
    limiter, breaker = RecordingLimiter(), RecordingBreaker()
    hooks = FleetHooks(limiter=limiter, breaker=breaker)
    client = _client(httpx, lambda r: httpx.Response(429, headers={"retry-after": "2"}), hooks)
    assert client.get("https://vendor-a.example/").status_code == 429
    assert limiter.paused == [("vendor-a.example", 2.0)]
    assert ("failure", "vendor-a.example") not in breaker.events
    assert limiter.log[-1] == "release"


def test_5xx_and_connection_errors_count_against_the_circuit() -> None:
    breaker = RecordingBreaker()
    client = _client(httpx, lambda r: httpx.Response(503), FleetHooks(breaker=breaker))
    client.get("https://down.example/")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    limiter = RecordingLimiter()
    failing = _client(httpx, refuse, FleetHooks(breaker=breaker, limiter=limiter))
    with pytest.raises(httpx.ConnectError):
        failing.get("https://down.example/")
    assert breaker.events.count(("failure", "down.example")) == 2
    assert limiter.log == ["acquire", "release"], "a failed send still releases its lease"


def test_a_refused_acquire_defers_and_sends_nothing() -> None:
    sent: list[httpx.Request] = []
    limiter = RecordingLimiter(refuse_with=3.5)
    client = _client(httpx, lambda r: sent.append(r) or httpx.Response(200), FleetHooks(limiter=limiter))
    with pytest.raises(Deferred) as caught:
        client.get("https://vendor-a.example/")
    assert caught.value.wait_s == 3.5
    assert sent == []


def _messages_reply(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(
        200,
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": "positive"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 12, "output_tokens": 3, "cache_read_input_tokens": 4},
        },
    )


def test_a_messages_call_charges_tokens_then_reconciles_with_the_real_usage() -> None:
    limiter = RecordingLimiter()
    usages: list[tuple[CallInfo, TokenUsage]] = []
    hooks = FleetHooks(
        limiter=limiter,
        on_usage=lambda info, usage: usages.append((info, usage)),
        vendors=[AnthropicAdapter()],
    )
    client = _client(httpx2, _messages_reply, hooks)
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "x" * 400}],
    }
    response = client.post("https://api.anthropic.com/v1/messages", json=body)
    assert response.json()["content"][0]["text"] == "positive"
    acquired = limiter.acquired[0]
    assert acquired["downstream"] == "anthropic:claude-haiku-4-5"
    assert acquired["also"] == ("api.anthropic.com",)
    assert acquired["out"] == 64
    assert 100 <= acquired["in"] <= 130, "about four characters a token"
    assert limiter.permits[0].reconciled == {"input": 16, "output": 3}
    assert limiter.log == ["acquire", "reconcile", "release"], "the lease ends as soon as the reply is read"
    info, usage = usages[0]
    assert info.model == "claude-haiku-4-5"
    assert usage.as_dict() == {
        "input_tokens": 12,
        "output_tokens": 3,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
    }


def test_a_streamed_messages_reply_is_accounted_from_its_events() -> None:
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 20, "output_tokens": 1}}},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "message_delta", "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    ]
    sse = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=sse)

    limiter = RecordingLimiter()
    usages: list[TokenUsage] = []
    hooks = FleetHooks(
        limiter=limiter, on_usage=lambda info, usage: usages.append(usage), vendors=[AnthropicAdapter()]
    )
    client = _client(httpx2, handler, hooks)
    body = {"model": "claude-haiku-4-5", "max_tokens": 50, "stream": True, "messages": []}
    with client.stream("POST", "https://api.anthropic.com/v1/messages", json=body) as response:
        response.read()
    assert usages[0].input_tokens == 20 and usages[0].output_tokens == 7
    assert limiter.permits[0].reconciled == {"input": 20, "output": 7}
    assert limiter.log[-1] == "release"


def test_the_gate_runs_before_anything_is_acquired() -> None:
    limiter = RecordingLimiter()

    def gate() -> None:
        raise RuntimeError("over budget")

    client = _client(httpx, lambda r: httpx.Response(200), FleetHooks(limiter=limiter, gate=gate))
    with pytest.raises(RuntimeError, match="over budget"):
        client.get("https://vendor-a.example/")
    assert limiter.log == []


def test_a_429_without_retry_after_pauses_for_the_configured_default() -> None:
    limiter = RecordingLimiter()
    hooks = FleetHooks(limiter=limiter, default_pause_s=2.5)
    client = _client(httpx, lambda r: httpx.Response(529), hooks)
    client.get("https://vendor-a.example/")
    assert limiter.paused == [("vendor-a.example", 2.5)]


def test_a_retry_after_ms_header_sets_the_pause_in_milliseconds() -> None:
    limiter = RecordingLimiter()
    client = _client(
        httpx, lambda r: httpx.Response(429, headers={"retry-after-ms": "1500"}), FleetHooks(limiter=limiter)
    )
    client.get("https://vendor-a.example/")
    assert limiter.paused == [("vendor-a.example", 1.5)]
