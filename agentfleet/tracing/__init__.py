"""OpenTelemetry traces of runs, items, attempts, model calls, tool calls and requests.

Off unless the standard ``OTEL_*`` environment variables ask for traces (see ``wanted``); then
the OpenTelemetry SDK (the ``otel`` extra) exports them over OTLP/HTTP, configured by those
same variables (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ``OTEL_BSP_*``, ...).
While off, nothing of OpenTelemetry is imported and every call here is a few attribute reads.

One trace per run: ``Fleet.map`` (and every dispatch) opens the run's span; its context is
stored in the run's record (``TRACE_FIELD``) and carried in the headers of every task message
(Celery's ``before_task_publish`` signal), so an item's delivery, its next stage, graph step,
retry or deferral continues the trace wherever it runs; a DLQ requeue and the reconciler's
resends continue it from the record.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, TypeVar

__all__ = [
    "TRACE_FIELD",
    "TRACE_ID_FIELD",
    "NoSpan",
    "annotate",
    "bind",
    "enabled",
    "flush",
    "inject",
    "message_span",
    "run_fields",
    "span",
    "start",
    "wanted",
]

log = logging.getLogger("agentfleet.tracing")

# The run record's fields: the run span's context (a W3C carrier, JSON) and its trace id (hex).
TRACE_FIELD = "trace_carrier"
TRACE_ID_FIELD = "trace_id"

F = TypeVar("F", bound=Callable[..., Any])


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: the process's) asks for traces: an OTLP exporter named in
    ``OTEL_TRACES_EXPORTER``, or else an OTLP endpoint set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``); never with ``OTEL_SDK_DISABLED=true``."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return "otlp" in [name.strip() for name in exporters.split(",")]
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


class NoSpan:
    """What a span is while tracing is off: it takes attributes and keeps none."""

    trace_id = ""

    def set(self, key: str, value: Any) -> None:
        return None

    def set_many(self, attributes: Mapping[str, Any]) -> None:
        return None

    def fail(self, description: str) -> None:
        return None

    def settle(self) -> None:
        return None

    def end(self) -> None:
        return None

    def __enter__(self) -> NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


NO_SPAN = NoSpan()

# None: not decided yet; False: off; else the SDK side (``agentfleet.tracing.sdk.Tracing``).
_state: Any = None


def _tracing() -> Any:
    """The SDK side when tracing is on, else False (decided once per process)."""
    global _state
    if _state is None:
        _state = False
        if wanted():
            try:
                from agentfleet.tracing.sdk import Tracing
            except ImportError as exc:
                log.warning(
                    "OTEL_* asks for traces but the OpenTelemetry SDK is not installed (%s); "
                    "install agentfleet[otel]. Running without traces.",
                    exc,
                )
            else:
                _state = Tracing.install()
    return _state


def enabled() -> bool:
    """Whether this process exports traces."""
    return (_state if _state is not None else _tracing()) is not False


def span(
    name: str,
    *,
    kind: str = "internal",
    attributes: Mapping[str, Any] | None = None,
    parent: str | None = None,
    under: Any = None,
) -> Any:
    """A context manager: a span named ``name`` made current while the block runs (``kind``:
    internal, client, server, producer or consumer). ``parent`` is a stored carrier (JSON, see
    ``run_fields``), or ``under`` a span from ``start``, to continue instead of the current
    span. An exception leaving the block
    marks the span an error (its type only: messages may hold secrets) unless ``settle()`` was
    called. Off: a ``NoSpan``."""
    state = _state if _state is not None else _tracing()
    if state is False:
        return NO_SPAN
    return state.span(name, kind=kind, attributes=attributes, parent=parent, under=under)


def start(name: str, *, kind: str = "internal", attributes: Mapping[str, Any] | None = None) -> Any:
    """A span under the current one, not made current, that the caller ends (``end()``): for
    work that ends elsewhere (a streamed reply ends when its body is closed)."""
    state = _state if _state is not None else _tracing()
    if state is False:
        return NO_SPAN
    return state.start(name, kind=kind, attributes=attributes)


def message_span(name: str, request: Any, attributes: Mapping[str, Any] | None = None) -> Any:
    """A consumer span for one delivery, continuing the trace carried in the headers of the
    task message whose Celery ``request`` (``task.request``) is given."""
    state = _state if _state is not None else _tracing()
    if state is False:
        return NO_SPAN
    return state.message_span(name, request, attributes)


def annotate(attributes: Mapping[str, Any], *, error: str | None = None, settled: bool = False) -> None:
    """Set ``attributes`` on the current span (an ``error`` description marks it failed;
    ``settled`` keeps an exception leaving its block from marking it failed)."""
    state = _state if _state is not None else _tracing()
    if state is not False:
        state.annotate(attributes, error=error, settled=settled)


def inject(headers: MutableMapping[str, str]) -> None:
    """Put the current span's context into ``headers`` (an outgoing request's), when on."""
    state = _state if _state is not None else _tracing()
    if state is not False:
        state.inject(headers)


def run_fields() -> dict[str, str]:
    """The current span's context as run record fields (``TRACE_FIELD``, ``TRACE_ID_FIELD``);
    empty when off."""
    state = _state if _state is not None else _tracing()
    if state is False:
        return {}
    return state.run_fields()


def bind(fn: F) -> F:
    """``fn`` to run in another thread within the current span (a thread pool does not carry
    context by itself). Call once per submission; off, ``fn`` itself."""
    state = _state if _state is not None else _tracing()
    if state is False:
        return fn
    import contextvars
    import functools

    return functools.wraps(fn)(functools.partial(contextvars.copy_context().run, fn))  # type: ignore[return-value]


def flush(timeout_s: float = 5.0) -> None:
    """Export the spans not yet sent, waiting up to ``timeout_s`` seconds (when on)."""
    if _state:
        _state.flush(timeout_s)
