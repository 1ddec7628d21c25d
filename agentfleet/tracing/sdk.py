"""The OpenTelemetry side of ``agentfleet.tracing``, imported only when traces are wanted.

``Tracing.install()`` uses the tracer provider the application registered, if it registered
an SDK one; otherwise it registers one exporting over OTLP/HTTP (protobuf) with a batch
processor, both configured by the standard ``OTEL_*`` variables, and a service name of
``agentfleet`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES`` names one. It
connects Celery's ``before_task_publish`` signal (every task message sent carries the current
span's context in its headers) and the worker's shutdown signals (spans not yet exported are
flushed).
"""

from __future__ import annotations

import contextvars
import json
import os
from collections.abc import Mapping, MutableMapping
from types import TracebackType
from typing import Any

from celery import signals
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

__all__ = ["Tracing"]

_KINDS = {
    "internal": SpanKind.INTERNAL,
    "client": SpanKind.CLIENT,
    "server": SpanKind.SERVER,
    "producer": SpanKind.PRODUCER,
    "consumer": SpanKind.CONSUMER,
}


class _RequestGetter(Getter[Any]):
    """Reads a propagator's fields from a Celery request: a message's own headers are
    attributes of ``task.request``."""

    def get(self, carrier: Any, key: str) -> list[str] | None:
        value = getattr(carrier, key, None)
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Any) -> list[str]:
        return []


_REQUEST_GETTER = _RequestGetter()


def _clean(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Attributes OpenTelemetry takes (None values dropped)."""
    return {k: v for k, v in (attributes or {}).items() if v is not None}


class _Span:
    """A live span, current while its ``with`` block runs."""

    __slots__ = ("_live_token", "_span", "_token", "carries_on", "ended", "settled")

    def __init__(self, otel_span: Any, token: Any = None) -> None:
        self._span = otel_span
        self._token = token
        self._live_token = _LIVE.set(self) if token is not None else None
        self.settled = False
        self.ended = False
        self.carries_on = False

    @property
    def trace_id(self) -> str:
        return trace.format_trace_id(self._span.get_span_context().trace_id)

    def set(self, key: str, value: Any) -> None:
        if value is not None and not self.ended:
            self._span.set_attribute(key, value)

    def set_many(self, attributes: Mapping[str, Any]) -> None:
        if not self.ended:
            self._span.set_attributes(_clean(attributes))

    def fail(self, description: str) -> None:
        if not self.ended:
            self._span.set_status(Status(StatusCode.ERROR, description))
        self.settled = True

    def settle(self) -> None:
        self.settled = True

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self._span.end()

    def __enter__(self) -> _Span:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is not None and not self.settled and not self.ended:
                self._span.set_attribute("error.type", exc_type.__name__)
                self._span.set_status(Status(StatusCode.ERROR, exc_type.__name__))
        finally:
            if self._live_token is not None:
                _LIVE.reset(self._live_token)
            if self._token is not None:
                otel_context.detach(self._token)
                if self.carries_on and _TASK_TOKEN.get() is not None:
                    # What the task sends after this delivery (a chain's next stage) follows
                    # from it; ``task_postrun`` restores the context from before the task.
                    otel_context.attach(trace.set_span_in_context(self._span))
            self.end()


# The context token of the Celery task running in this context (``task_prerun``), if any.
_TASK_TOKEN: contextvars.ContextVar[Any] = contextvars.ContextVar("agentfleet_task_context", default=None)

# The innermost span of ours made current in this context (``annotate`` sets its outcome).
_LIVE: contextvars.ContextVar[_Span | None] = contextvars.ContextVar("agentfleet_span", default=None)


class Tracing:
    """The process's tracer and its propagator."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("agentfleet")

    @classmethod
    def install(cls) -> Tracing:
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            attributes = {}
            named = "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
            if not os.environ.get("OTEL_SERVICE_NAME") and not named:
                attributes["service.name"] = "agentfleet"
            provider = TracerProvider(resource=Resource.create(attributes))
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
            trace.set_tracer_provider(provider)
        tracing = cls(provider)
        signals.before_task_publish.connect(tracing._carry, weak=False)
        signals.task_prerun.connect(tracing._task_started, weak=False)
        signals.task_postrun.connect(tracing._task_ended, weak=False)
        signals.worker_process_shutdown.connect(tracing._flush_at_exit, weak=False)
        signals.worker_shutdown.connect(tracing._flush_at_exit, weak=False)
        return tracing

    # Spans ---------------------------------------------------------------------------------

    def _current(self, parent_ctx: Any, name: str, kind: str, attributes: Mapping[str, Any] | None) -> _Span:
        otel_span = self.tracer.start_span(
            name, context=parent_ctx, kind=_KINDS[kind], attributes=_clean(attributes)
        )
        token = otel_context.attach(trace.set_span_in_context(otel_span, parent_ctx))
        return _Span(otel_span, token)

    def span(
        self,
        name: str,
        *,
        kind: str,
        attributes: Mapping[str, Any] | None,
        parent: str | None,
        under: Any = None,
    ) -> _Span:
        parent_ctx = None
        if isinstance(under, _Span):
            parent_ctx = trace.set_span_in_context(under._span)
        elif parent:
            try:
                carrier = json.loads(parent)
            except ValueError:
                carrier = {}
            parent_ctx = propagate.extract(carrier if isinstance(carrier, dict) else {})
        return self._current(parent_ctx, name, kind, attributes)

    def start(self, name: str, *, kind: str, attributes: Mapping[str, Any] | None) -> _Span:
        return _Span(self.tracer.start_span(name, kind=_KINDS[kind], attributes=_clean(attributes)))

    def message_span(self, name: str, request: Any, attributes: Mapping[str, Any] | None) -> _Span:
        parent_ctx = propagate.extract(request, getter=_REQUEST_GETTER) if request is not None else None
        delivery = self._current(parent_ctx, name, "consumer", attributes)
        delivery.carries_on = True
        return delivery

    def annotate(self, attributes: Mapping[str, Any], *, error: str | None, settled: bool) -> None:
        live = _LIVE.get()
        if live is None:
            return
        live.set_many(attributes)
        if error is not None:
            live.fail(error)
        elif settled:
            live.settle()

    # Context -------------------------------------------------------------------------------

    def inject(self, headers: MutableMapping[str, str]) -> None:
        propagate.inject(headers)

    def run_fields(self) -> dict[str, str]:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        span_context = trace.get_current_span().get_span_context()
        if not carrier or not span_context.is_valid:
            return {}
        trace_id = trace.format_trace_id(span_context.trace_id)
        return {"trace_carrier": json.dumps(carrier), "trace_id": trace_id}

    def _carry(self, headers: MutableMapping[str, Any] | None = None, **_: Any) -> None:
        """Celery's ``before_task_publish``: the message carries the current span's context (a
        message sent outside any span keeps what it carried)."""
        if headers is None or not trace.get_current_span().get_span_context().is_valid:
            return
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        headers.update(carrier)

    def _task_started(self, task: Any = None, **_: Any) -> None:
        """Celery's ``task_prerun``: the task runs in the context its message carried, so what
        Celery itself sends for it (a chain's next stage) continues the trace."""
        request = getattr(task, "request", None)
        _TASK_TOKEN.set(otel_context.attach(propagate.extract(request, getter=_REQUEST_GETTER)))

    def _task_ended(self, **_: Any) -> None:
        """Celery's ``task_postrun``: back to the context before the task."""
        token = _TASK_TOKEN.get()
        if token is not None:
            _TASK_TOKEN.set(None)
            otel_context.detach(token)

    def flush(self, timeout_s: float) -> None:
        force_flush = getattr(self.provider, "force_flush", None)
        if force_flush is not None:
            force_flush(int(timeout_s * 1000))

    def _flush_at_exit(self, **_: Any) -> None:
        self.flush(5.0)
