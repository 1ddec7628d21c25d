"""The JSON answers every route of the service shares: an error, Redis not answering, and the
service token's check."""

from __future__ import annotations

import hmac
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentfleet.config import Settings
from agentfleet.service.guard import mark_authenticated

__all__ = ["json_error", "token_refusal", "unavailable"]

TRIGGER_OFF = "the run trigger is off: set AGENTFLEET_SERVICE__TOKEN to turn it on"


def json_error(message: str, status_code: int, **extra: Any) -> JSONResponse:
    """``{"error": message, ...extra}`` with ``status_code``."""
    return JSONResponse({"error": message, **extra}, status_code=status_code)


def unavailable(exc: Exception) -> JSONResponse:
    """503: Redis did not answer (``exc`` says how)."""
    return JSONResponse({"status": "degraded", "reasons": [f"Redis does not answer: {exc}"]}, status_code=503)


def token_refusal(request: Request, settings: Settings, *, off: str = TRIGGER_OFF) -> Response | None:
    """None when ``request`` carries the service token as a bearer token (the request is then
    marked authenticated); else the answer refusing it: 403 saying ``off`` when no token is
    configured, 401 when it is missing or wrong."""
    token = settings.service.token
    if token is None:
        return json_error(off, 403)
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), token.get_secret_value().encode()
    ):
        return JSONResponse(
            {"error": "a valid bearer token is required"},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="agentfleet"'},
        )
    mark_authenticated(request.scope)
    return None
