"""The behaviour of the mock Messages API, and the state behind it.

``MessagesEndpoint`` answers ``/v1/messages`` and ``/v1/messages/count_tokens`` (see
``agentfleet.mock_llm.server`` for the order of checks) and keeps the request log, the
limits, the injected and scripted errors and the latency. One lock guards that state; replies
are computed and delayed outside it, so slow replies never wait on each other.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentfleet.errors import MockRequestInvalid, MockSetupInvalid
from agentfleet.mock_llm.http_server import Exchange
from agentfleet.mock_llm.model import MockFailure, MockModel
from agentfleet.mock_llm.policy import ErrorInjector, Latency, RateLimits, ScriptedReply
from agentfleet.mock_llm.protocol import (
    error_body,
    message_body,
    sse_error,
    sse_events,
    validate_request,
)

__all__ = ["LIMIT_OPTIONS", "MessagesEndpoint", "RequestRecord"]

LIMIT_OPTIONS = (
    "requests_per_min",
    "input_tokens_per_min",
    "output_tokens_per_min",
    "tokens_per_min",
)


@dataclass(frozen=True)
class RequestRecord:
    """One request to ``/v1/...``, logged when its response was sent.

    ``arrived_at`` is a Unix time in seconds; ``duration_s`` runs from arrival to response.
    ``sdk_retry_count`` is the SDK's ``x-stainless-retry-count`` header, if sent. ``prompt`` is
    the first user message's text (its first 200 characters), which tells whose conversation a
    request belongs to; ``conversation`` is a digest of the whole request's messages, so the
    same conversation sent twice (a repeated model call) has the same one.
    """

    arrived_at: float
    path: str
    status: int
    request_id: str
    model: str | None = None
    api_key: str | None = None
    stream: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    error_type: str | None = None
    scripted: bool = False
    sdk_retry_count: int | None = None
    prompt: str | None = None
    conversation: str | None = None


@dataclass
class _Call:
    """What the server learns about one request while answering it."""

    exchange: Exchange
    arrived_at: float
    started: float
    request_id: str
    headers: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    api_key: str | None = None
    stream: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    error_type: str | None = None
    scripted: bool = False
    finished: bool = False
    prompt: str | None = None
    conversation: str | None = None


def _who_asks(messages: Any) -> tuple[str | None, str | None]:
    """The first user message's text (cut at 200 characters) and a digest of ``messages``."""
    if not isinstance(messages, list) or not messages:
        return None, None
    first = messages[0].get("content") if isinstance(messages[0], dict) else None
    if isinstance(first, list):
        first = " ".join(b.get("text", "") for b in first if isinstance(b, dict))
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return (str(first)[:200] if first is not None else None), digest


class _Abort(Exception):
    """The server is stopping: drop the connection without answering."""


class MessagesEndpoint:
    """The Messages API's behaviour; ``MockMessagesServer`` documents the arguments."""

    def __init__(
        self,
        *,
        latency: float | str | Latency = 0.0,
        limits: Mapping[str, float | None] | None = None,
        error_rates: Mapping[int, float] | None = None,
        seed: int = 0,
        api_key: str | Collection[str] | None = None,
        models: Collection[str] | None = None,
        max_body_bytes: int = 32 * 1024 * 1024,
        stopping: threading.Event | None = None,
    ) -> None:
        unknown = set(limits or {}) - set(LIMIT_OPTIONS)
        if unknown:
            raise MockSetupInvalid(f"unknown mock server limits: {', '.join(sorted(unknown))}")
        self._limit_options: dict[str, float | None] = dict.fromkeys(LIMIT_OPTIONS)
        self._limit_options.update(limits or {})
        self._rng = random.Random(seed)
        self.latency = Latency.parse(latency)
        self._limits = self._new_limits()
        self._faults = ErrorInjector(error_rates, self._rng)
        self._keys = frozenset([api_key] if isinstance(api_key, str) else api_key or ())
        self._models = frozenset(models) if models is not None else None
        self.max_body_bytes = max_body_bytes
        self.model = MockModel(seed=seed)
        self._lock = threading.Lock()
        self._log: list[RequestRecord] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._stopping = stopping or threading.Event()

    # Control ------------------------------------------------------------------------------

    def script(self, replies: Iterable[int | Mapping[str, Any] | ScriptedReply]) -> int:
        """Queue exact replies for the next requests, in arrival order; returns how many wait.

        ``server.script([{"status": 429, "retry_after_s": 2}, 200])``: a 429 with
        ``retry-after: 2``, then a normal reply. See ``ScriptedReply`` for the fields.
        """
        with self._lock:
            return self._faults.script(replies)

    def clear_script(self) -> None:
        """Forget the scripted replies not used yet."""
        with self._lock:
            self._faults.clear_script()

    def configure(
        self,
        *,
        latency: float | str | Latency | None = None,
        error_rates: Mapping[int, float] | None = None,
        **limits: float | None,
    ) -> None:
        """Change latency, error rates or limits while serving; a changed limit starts full."""
        unknown = set(limits) - set(LIMIT_OPTIONS)
        if unknown:
            raise MockSetupInvalid(f"unknown mock server settings: {', '.join(sorted(unknown))}")
        # Everything is checked before anything changes, so a bad value changes nothing.
        new_latency = Latency.parse(latency) if latency is not None else None
        new_rates = ErrorInjector.check_rates(error_rates) if error_rates is not None else None
        options = {**self._limit_options, **limits}
        new_limits = self._new_limits(options) if limits else None
        with self._lock:
            if new_latency is not None:
                self.latency = new_latency
            if new_rates is not None:
                self._faults.error_rates = new_rates
            if new_limits is not None:
                self._limit_options = options
                self._limits = new_limits

    def reset(self) -> None:
        """Forget the request log, the script and the counters; refill the limits."""
        with self._lock:
            self._log.clear()
            self._faults.clear_script()
            self._limits = self._new_limits()
            self._max_in_flight = self._in_flight

    @property
    def requests(self) -> list[RequestRecord]:
        """The request log, in order of arrival."""
        with self._lock:
            return sorted(self._log, key=lambda r: r.arrived_at)

    def stats(self) -> dict[str, Any]:
        """Counters and settings, as ``GET /_mock/stats`` returns them."""
        with self._lock:
            by_status = Counter(str(r.status) for r in self._log)
            return {
                "requests": len(self._log),
                "by_status": dict(sorted(by_status.items())),
                "in_flight": self._in_flight,
                "max_in_flight": self._max_in_flight,
                "scripted_pending": self._faults.pending,
                "input_tokens": sum(r.input_tokens for r in self._log),
                "output_tokens": sum(r.output_tokens for r in self._log),
                "latency": self.latency.describe(),
                "error_rates": {str(k): v for k, v in self._faults.error_rates.items()},
                "limits": dict(self._limit_options),
            }

    def _new_limits(self, options: Mapping[str, float | None] | None = None) -> RateLimits:
        o = self._limit_options if options is None else options
        for name, value in o.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise MockSetupInvalid(f"mock server setting {name} must be a number, got {value!r}")
        return RateLimits(
            requests_per_min=o["requests_per_min"],
            input_tokens_per_min=o["input_tokens_per_min"],
            output_tokens_per_min=o["output_tokens_per_min"],
            tokens_per_min=o["tokens_per_min"],
        )

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_mock{self._rng.getrandbits(96):024x}"

    def not_found(self, exchange: Exchange) -> None:
        """404 in Anthropic's error shape, for a path the server does not serve."""
        exchange.discard_body()
        with self._lock:
            request_id = self._new_id("req")
        exchange.send_json(
            404,
            error_body(404, f"{exchange.method} {exchange.path} not found", request_id=request_id),
            {"request-id": request_id},
        )

    def _begin(self, exchange: Exchange) -> _Call:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            request_id = self._new_id("req")
        call = _Call(exchange, time.time(), time.monotonic(), request_id)
        exchange.before_send = lambda _status: self._finish(call)
        return call

    def _finish(self, call: _Call) -> None:
        """Log the call and count it out of flight, once (before its response is sent)."""
        if call.finished:
            return
        call.finished = True
        retry_count = call.exchange.header("x-stainless-retry-count")
        record = RequestRecord(
            arrived_at=call.arrived_at,
            path=call.exchange.path,
            status=call.exchange.status or 0,
            request_id=call.request_id,
            model=call.model,
            api_key=call.api_key,
            stream=call.stream,
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            duration_s=time.monotonic() - call.started,
            error_type=call.error_type,
            scripted=call.scripted,
            sdk_retry_count=int(retry_count) if retry_count and retry_count.isdigit() else None,
            prompt=call.prompt,
            conversation=call.conversation,
        )
        with self._lock:
            self._in_flight -= 1
            if call.exchange.status is not None:
                self._log.append(record)

    def _fail(
        self,
        call: _Call,
        status: int,
        message: str,
        *,
        retry_after_s: float | None = None,
        error_type: str | None = None,
        error_code: str | None = None,
    ) -> None:
        body = error_body(
            status,
            message,
            request_id=call.request_id,
            error_type=error_type,
            error_code=error_code,
        )
        call.error_type = body["error"]["type"]
        headers = {**call.headers, "request-id": call.request_id}
        if retry_after_s is not None:
            headers["retry-after"] = f"{retry_after_s:g}"
        call.exchange.send_json(status, body, headers)

    def _authenticate(self, call: _Call) -> bool:
        """Check the key; on failure answer 401 (after reading the body) and return False."""
        bearer = call.exchange.header("authorization") or ""
        key = call.exchange.header("x-api-key") or (
            bearer[7:].strip() if bearer.lower().startswith("bearer ") else None
        )
        call.api_key = key
        if not key:
            problem = "x-api-key header is required"
        elif self._keys and key not in self._keys:
            problem = "invalid x-api-key"
        else:
            return True
        call.exchange.discard_body()
        self._fail(call, 401, problem)
        return False

    def _read_request(self, call: _Call, *, counting: bool = False) -> dict[str, Any] | None:
        exchange = call.exchange
        if exchange.body_length > self.max_body_bytes:
            exchange.discard_body()
            self._fail(call, 413, f"Request exceeds the maximum size of {self.max_body_bytes} bytes")
            return None
        try:
            body = json.loads(exchange.read_body() or b"null")
        except ValueError:
            self._fail(call, 400, "The request body is not valid JSON")
            return None
        if isinstance(body, dict):
            call.model = body.get("model") if isinstance(body.get("model"), str) else None
            call.stream = body.get("stream") is True and not counting
            call.prompt, call.conversation = _who_asks(body.get("messages"))
        try:
            validate_request(body, counting=counting)
        except MockRequestInvalid as exc:
            self._fail(call, 400, exc.message)
            return None
        if self._models is not None and call.model not in self._models:
            self._fail(call, 404, f"model: {call.model}")
            return None
        return body

    def count_tokens(self, exchange: Exchange) -> None:
        """Answer ``POST /v1/messages/count_tokens``."""
        call = self._begin(exchange)
        try:
            if not self._authenticate(call):
                return
            body = self._read_request(call, counting=True)
            if body is not None:
                call.input_tokens = self.model.count_input_tokens(body)
                exchange.send_json(200, {"input_tokens": call.input_tokens}, {"request-id": call.request_id})
        finally:
            self._finish(call)

    def _wait(self, seconds: float) -> None:
        if seconds > 0 and self._stopping.wait(seconds):
            raise _Abort

    def messages(self, exchange: Exchange) -> None:
        """Answer ``POST /v1/messages``."""
        call = self._begin(exchange)
        try:
            if not self._authenticate(call):
                return
            body = self._read_request(call)
            if body is not None:
                self._answer(call, body)
        except _Abort:
            exchange.drop_connection()
        finally:
            self._finish(call)

    def _admit(self, call: _Call, max_tokens: int) -> tuple[ScriptedReply | None, float, bool]:
        """``(scripted reply, latency in s, admitted by the limits)``; answers 429/5xx itself."""
        with self._lock:
            scripted = self._faults.next_scripted()
            wait_s: float | None = None
            injected: int | None = None
            if scripted is None:
                wait_s = self._limits.admit(call.input_tokens, max_tokens)
                injected = self._faults.draw() if wait_s is None else None
            delay = self.latency.sample(self._rng)
            call.headers = self._limits.headers()
        call.scripted = scripted is not None
        if wait_s is not None:
            self._fail(
                call,
                429,
                "This request would exceed the mock server's rate limit. Retry after "
                "the time in the retry-after header.",
                retry_after_s=float(max(1, math.ceil(wait_s))),
            )
        elif injected is not None:
            self._fail(call, injected, f"injected {injected} (mock error rate)")
        return scripted, delay, scripted is None and wait_s is None and injected is None

    def _answer(self, call: _Call, body: dict[str, Any]) -> None:
        max_tokens = int(body["max_tokens"])
        call.input_tokens = self.model.count_input_tokens(body)
        scripted, delay, admitted = self._admit(call, max_tokens)
        if call.exchange.status is not None:
            return
        if scripted is not None and scripted.delay_s is not None:
            delay = scripted.delay_s
        if scripted is not None and scripted.status != 200 and not (scripted.in_stream and call.stream):
            self._wait(delay)
            self._fail_scripted(call, scripted)
            return
        try:
            reply = self.model.respond(body)
        except MockRequestInvalid as exc:
            reply = MockFailure(400, exc.message)
        if isinstance(reply, MockFailure):
            if admitted:
                with self._lock:
                    # Nothing was generated: give back the reserved output tokens.
                    self._limits.settle(max_tokens, 0)
            self._fail(call, reply.status, reply.message, retry_after_s=reply.retry_after_s)
            return
        self._wait(delay + reply.delay_s)
        content = reply.content
        if scripted is not None and scripted.text is not None:
            content = [{"type": "text", "text": scripted.text}]
        usage = dict(reply.usage)
        call.input_tokens = usage["input_tokens"]
        call.output_tokens = usage["output_tokens"]
        with self._lock:
            if admitted:
                self._limits.settle(max_tokens, call.output_tokens)
            call.headers = self._limits.headers()
        message = message_body(
            message_id=self._new_locked_id("msg"),
            model=str(body["model"]),
            content=content,
            stop_reason=reply.stop_reason,
            stop_sequence=reply.stop_sequence,
            usage=usage,
        )
        headers = {**call.headers, "request-id": call.request_id}
        if not call.stream:
            call.exchange.send_json(200, message, headers)
        elif scripted is not None and scripted.status != 200:
            events = sse_events(message)
            call.exchange.send_stream(200, [next(events), self._scripted_event(call, scripted)], headers)
        else:
            call.exchange.send_stream(200, sse_events(message), headers)

    def _new_locked_id(self, prefix: str) -> str:
        with self._lock:
            return self._new_id(prefix)

    def _fail_scripted(self, call: _Call, scripted: ScriptedReply) -> None:
        self._fail(
            call,
            scripted.status,
            scripted.message or f"scripted {scripted.status}",
            retry_after_s=scripted.retry_after_s,
            error_type=scripted.error_type,
            error_code=scripted.error_code,
        )

    def _scripted_event(self, call: _Call, scripted: ScriptedReply) -> bytes:
        body = error_body(
            scripted.status,
            scripted.message or f"scripted {scripted.status}",
            request_id=call.request_id,
            error_type=scripted.error_type,
            error_code=scripted.error_code,
        )
        call.error_type = body["error"]["type"]
        return sse_error(body)
