"""The service's approval and event routes (registered by ``create_app``).

With ``Authorization: Bearer <service.token>``:

- ``GET /approvals``: ``?status=`` (``pending`` by default; ``approved``, ``rejected``,
  ``timed_out``, ``cancelled`` or ``all``), ``?run=`` (a run id), ``?limit=`` (1 to 1000,
  default 100): ``{"approvals": [...]}``, the oldest first;
- ``GET /approvals/{id}``: one approval (404 when unknown);
- ``POST /approvals/{id}`` with ``{"approved": true|false, "comment": ..., "data": ..., "by":
  ...}``: decides it and answers 200 with the approval as decided. A second decision answers
  409 with ``{"error", "approval"}`` (the decision that stands: who, what, when); a decision
  after the timeout answers 410 with the approval as the timeout left it; an unknown id 404.
  The service knows one token and no person, so ``by`` is who the caller says decided
  (default ``"service"``);
- ``POST /events/{key}`` with ``{"data": ...}``: completes every item waiting on event
  ``key``; answers 200 with ``{"key", "completed"}`` (how many were waiting).

Without a token, through the link's signature (``agentfleet.approvals.links``):

- ``GET /approvals/{id}/decide?expires=&sig=``: a small page saying what is asked, with a form
  to approve or reject (and a comment); a chat app previewing the link decides nothing;
- ``POST /approvals/{id}/decide``: the form's answer; decides once. Any later use says who
  decided what, and when. A bad or expired signature answers 403.

Every approval shown passes the redactor.
"""

from __future__ import annotations

from typing import Any

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agentfleet.approvals.filters import status_filter
from agentfleet.approvals.model import Approval
from agentfleet.config import Settings
from agentfleet.errors import (
    ApprovalAlreadyDecided,
    ApprovalExpired,
    ApprovalNotFound,
    ConfigError,
    InvalidInput,
)
from agentfleet.orchestration import Fleet
from agentfleet.service.approval_link_pages import link_routes
from agentfleet.service.http_answers import json_error, token_refusal
from agentfleet.service.request_body import read_json_body

__all__ = ["approval_json", "approval_routes"]

APPROVALS_OFF = "approvals over HTTP are off: set AGENTFLEET_SERVICE__TOKEN to turn them on"

# The longest ``by`` or ``comment`` a caller may record, in characters.
MAX_TEXT = 2000


def _refused(request: Request, settings: Settings) -> Response | None:
    """None when the request carries the service token; else the response refusing it."""
    return token_refusal(request, settings, off=APPROVALS_OFF)


def approval_json(settings: Settings, approval: Approval) -> dict[str, Any]:
    """``approval`` as JSON, with every secret the settings know masked."""
    shown: dict[str, Any] = settings.redactor().value(approval.model_dump(mode="json"))
    return shown


def _text(document: dict[str, Any], name: str) -> str | None:
    value = document.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ValueError(f"{name} must be text of at most {MAX_TEXT} characters")
    return value


def _decision(document: Any) -> tuple[bool, str, str | None, Any]:
    """``(approved, by, comment, data)`` of a ``POST /approvals/{id}`` body; ``ValueError`` says
    what is wrong with it."""
    if not isinstance(document, dict) or not isinstance(document.get("approved"), bool):
        raise ValueError('send {"approved": true or false, "comment": "...", "data": ...}')
    unknown = sorted(set(document) - {"approved", "by", "comment", "data"})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; known: approved, by, comment, data")
    if not document["approved"] and document.get("data") is not None:
        raise ValueError("data goes with an approval only; a rejection carries a comment")
    return (
        document["approved"],
        _text(document, "by") or "service",
        _text(document, "comment"),
        document.get("data"),
    )


def decide(
    fleet: Fleet, approval_id: str, *, approved: bool, by: str, comment: str | None, data: Any
) -> Approval:
    """Approve or reject through ``fleet`` (raises the store's errors)."""
    if approved:
        return fleet.approve(approval_id, by=by, comment=comment, data=data)
    return fleet.reject(approval_id, by=by, comment=comment)


class _ApprovalApi:
    """The JSON routes' handlers, acting through ``fleet``."""

    def __init__(self, settings: Settings, fleet: Fleet) -> None:
        self.settings = settings
        self.fleet = fleet

    async def _body(self, request: Request) -> Any:
        service = self.settings.service
        return await read_json_body(
            request, max_bytes=service.max_body_bytes, max_depth=service.max_json_depth
        )

    async def list(self, request: Request) -> Response:
        refused = _refused(request, self.settings)
        if refused is not None:
            return refused
        params = request.query_params
        raw = params.get("limit", "100")
        try:
            status = status_filter(params.get("status", "pending"))
        except ConfigError as exc:
            return json_error(str(exc), 422)
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            return json_error("limit must be a whole number from 1 to 1000", 422)
        try:
            found = await run_in_threadpool(
                self.fleet.approval_store.list, params.get("run") or None, status, int(raw)
            )
        except (redis.RedisError, OSError) as exc:
            return json_error(f"Redis does not answer: {exc}", 503)
        return JSONResponse({"approvals": [approval_json(self.settings, a) for a in found]})

    async def show(self, request: Request) -> Response:
        refused = _refused(request, self.settings)
        if refused is not None:
            return refused
        try:
            found = await run_in_threadpool(self.fleet.approval_store.get, request.path_params["approval_id"])
        except ApprovalNotFound as exc:
            return json_error(str(exc), 404)
        except (redis.RedisError, OSError) as exc:
            return json_error(f"Redis does not answer: {exc}", 503)
        return JSONResponse(approval_json(self.settings, found))

    async def decide(self, request: Request) -> Response:
        refused = _refused(request, self.settings)
        if refused is not None:
            return refused
        try:
            approved, by, comment, data = _decision(await self._body(request))
        except InvalidInput as exc:
            return json_error(exc.message, exc.status_code or 422)
        except ValueError as exc:
            return json_error(str(exc), 422)
        approval_id = request.path_params["approval_id"]
        try:
            decided = await run_in_threadpool(
                decide, self.fleet, approval_id, approved=approved, by=by, comment=comment, data=data
            )
        except ApprovalNotFound as exc:
            return json_error(str(exc), 404)
        except ApprovalAlreadyDecided as exc:
            return json_error(str(exc), 409, approval=approval_json(self.settings, exc.approval))
        except ApprovalExpired as exc:
            return json_error(str(exc), 410, approval=approval_json(self.settings, exc.approval))
        except (redis.RedisError, OSError) as exc:
            return json_error(f"Redis does not answer: {exc}", 503)
        return JSONResponse(approval_json(self.settings, decided))

    async def send_event(self, request: Request) -> Response:
        refused = _refused(request, self.settings)
        if refused is not None:
            return refused
        try:
            document = await self._body(request)
        except InvalidInput as exc:
            return json_error(exc.message, exc.status_code or 422)
        if document is not None and (not isinstance(document, dict) or set(document) - {"data"}):
            return json_error('send {"data": ...} (or no body)', 422)
        key = request.path_params["key"]
        try:
            completed = await run_in_threadpool(self.fleet.send_event, key, (document or {}).get("data"))
        except (redis.RedisError, OSError) as exc:
            return json_error(f"Redis does not answer: {exc}", 503)
        return JSONResponse({"key": key, "completed": completed})


def approval_routes(settings: Settings, fleet: Fleet) -> list[BaseRoute]:
    """The routes above, acting through ``fleet``."""
    api = _ApprovalApi(settings, fleet)
    return [
        Route("/approvals", api.list, methods=["GET"]),
        *link_routes(settings, fleet),
        Route("/approvals/{approval_id}", api.show, methods=["GET"]),
        Route("/approvals/{approval_id}", api.decide, methods=["POST"]),
        Route("/events/{key:path}", api.send_event, methods=["POST"]),
    ]
