"""The behaviour of the mock Messages API, and the state behind it.

``MessagesEndpoint`` answers ``/v1/messages`` and ``/v1/messages/count_tokens`` (see
``agentfleet.mock_llm.server`` for the order of checks) and keeps the request log, the
limits, the injected and scripted errors and the latency (``mock_llm/endpoint_state.py``, with
the controls that change them; the log's records are ``mock_llm/request_log.py``). One lock
guards that state; replies are computed and delayed outside it, so slow replies never wait on
each other.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from agentfleet.errors import MockRequestInvalid
from agentfleet.mock_llm.endpoint_state import LIMIT_OPTIONS, EndpointState
from agentfleet.mock_llm.http_server import Exchange
from agentfleet.mock_llm.model import MockFailure
from agentfleet.mock_llm.policy import ScriptedReply
from agentfleet.mock_llm.protocol import (
    error_body,
    message_body,
    sse_error,
    sse_events,
    validate_request,
)
from agentfleet.mock_llm.request_log import Call, RequestRecord, record_of, who_asks

__all__ = ["LIMIT_OPTIONS", "MessagesEndpoint", "RequestRecord"]


class _Abort(Exception):
    """The server is stopping: drop the connection without answering."""


class MessagesEndpoint(EndpointState):
    """The Messages API's behaviour; ``MockMessagesServer`` documents the arguments."""

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

    def _begin(self, exchange: Exchange) -> Call:
        with self._lock:
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)
            request_id = self._new_id("req")
        call = Call(exchange, time.time(), time.monotonic(), request_id)
        exchange.before_send = lambda _status: self._finish(call)
        return call

    def _finish(self, call: Call) -> None:
        """Log the call and count it out of flight, once (before its response is sent)."""
        if call.finished:
            return
        call.finished = True
        record = record_of(call)
        with self._lock:
            self._in_flight -= 1
            if call.exchange.status is not None:
                self._log.append(record)

    def _fail(
        self,
        call: Call,
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

    def _authenticate(self, call: Call) -> bool:
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

    def _read_request(self, call: Call, *, counting: bool = False) -> dict[str, Any] | None:
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
            call.prompt, call.conversation = who_asks(body.get("messages"))
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

    def _admit(self, call: Call, max_tokens: int) -> tuple[ScriptedReply | None, float, bool]:
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

    def _answer(self, call: Call, body: dict[str, Any]) -> None:
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

    def _fail_scripted(self, call: Call, scripted: ScriptedReply) -> None:
        self._fail(
            call,
            scripted.status,
            scripted.message or f"scripted {scripted.status}",
            retry_after_s=scripted.retry_after_s,
            error_type=scripted.error_type,
            error_code=scripted.error_code,
        )

    def _scripted_event(self, call: Call, scripted: ScriptedReply) -> bytes:
        body = error_body(
            scripted.status,
            scripted.message or f"scripted {scripted.status}",
            request_id=call.request_id,
            error_type=scripted.error_type,
            error_code=scripted.error_code,
        )
        call.error_type = body["error"]["type"]
        return sse_error(body)
