"""A real OTLP/HTTP trace receiver on loopback: it decodes the protobuf export requests that
OpenTelemetry's OTLP exporter posts to ``/v1/traces`` and keeps their spans."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span: ids in hex, its service, attributes and status code."""

    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any] = field(default_factory=dict)
    status: int = 0


class OTLPReceiver:
    """``with OTLPReceiver() as receiver``: ``receiver.endpoint`` is what
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes; ``receiver.spans()`` what arrived so far."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver._take(request)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _take(self, request: ExportTraceServiceRequest) -> None:
        found = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    found.append(
                        ReceivedSpan(
                            service=str(resource.get("service.name", "")),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status=span.status.code,
                        )
                    )
        with self._lock:
            self._spans.extend(found)

    def spans(self, trace_id: str | None = None) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self._spans if trace_id is None or s.trace_id == trace_id]

    def wait_for(
        self, check: Callable[[list[ReceivedSpan]], bool], trace_id: str, timeout_s: float = 60.0
    ) -> list[ReceivedSpan]:
        """The spans of ``trace_id`` once ``check`` holds for them (an AssertionError past
        ``timeout_s`` seconds, with what did arrive)."""
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans(trace_id)
            if check(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted(f"{s.service}:{s.name}" for s in spans)
                raise AssertionError(f"trace {trace_id} did not fill in {timeout_s} s; it has {names}")
            time.sleep(0.1)

    def __enter__(self) -> OTLPReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
