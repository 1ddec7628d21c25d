"""Rendering console pages: the Jinja2 environment, its filters, and the response headers.

Templates autoescape everything. Values that may hold secrets (inputs, results, errors,
tracebacks) go through the ``redact`` filter, built from the settings' redactor, before they
are shown; and every text a page shows passes the redactor once more on its way out (Jinja's
``finalize``), then ``display.visible``, which writes control and direction characters as
``\\uXXXX`` (a run named ``invoice\\u202egpj.exe`` is shown as written, not reversed).
Pages carry a strict Content-Security-Policy: no script at all, styles and images from this
service only (so charts are inline SVG coloured by the stylesheet's classes, see ``svg``).
Text a chart or timeline writes inside its SVG (a worker's name, an item's key) goes through
``Renderer.shown`` (the same redactor and ``visible``) and is escaped there.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import jinja2
import markupsafe
from starlette.requests import Request
from starlette.responses import HTMLResponse

from agentfleet.config import Settings
from agentfleet.display import visible
from agentfleet.dlq.stats import format_age

__all__ = ["Renderer"]

_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}


def _usd(value: float | None) -> str:
    if value is None:
        return "-"
    return f"${value:,.4f}" if value < 100 else f"${value:,.2f}"


def _when(at: float | None) -> str:
    if not at:
        return "-"
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(at: float | None) -> str:
    if not at:
        return "-"
    return format_age(max(0.0, time.time() - at)) + " ago"


def _seconds(value: float | None) -> str:
    return format_age(value)


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GiB"


def _span(value: float) -> str:
    """A short stretch of time: ``0.25 s`` below ten seconds, else as ``seconds`` says it."""
    return f"{value:.2g} s" if value < 10 else format_age(value)


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


class Renderer:
    """Renders the console's templates with secrets redacted; one per service."""

    def __init__(self, settings: Settings) -> None:
        redactor = settings.redactor()

        def shown(value: Any) -> Any:
            if isinstance(value, str) and not isinstance(value, markupsafe.Markup):
                return visible(redactor.text(value))
            return value

        self.shown = lambda text: visible(redactor.text(text))

        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("agentfleet.service.console", "templates"),
            autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            finalize=shown,
        )

        def redact_text(value: Any) -> str:
            return redactor.text("" if value is None else str(value))

        def redact_json(value: Any) -> str:
            return json.dumps(
                redactor.value(value), indent=2, sort_keys=True, ensure_ascii=False, default=str
            )

        self.env.filters.update(
            usd=_usd,
            when=_when,
            ago=_ago,
            seconds=_seconds,
            redact=redact_text,
            redact_json=redact_json,
            bytes=_bytes,
            percent=_percent,
            span=_span,
        )

    def page(self, request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        """The page ``template`` with ``context``, the request's base path and security headers."""
        base = request.scope.get("root_path", "")
        path = request.url.path.removeprefix(base)
        still = urlencode(
            [*((k, v) for k, v in request.query_params.multi_items() if k != "refresh"), ("refresh", "0")]
        )
        body = self.env.get_template(template).render(
            base=base, path=path, still=f"{path}?{still}", **context
        )
        return HTMLResponse(body, status_code=status_code, headers=_HEADERS)
