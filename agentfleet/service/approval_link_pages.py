"""The signed link's two pages: ``GET /approvals/{id}/decide`` shows what is asked and a form,
``POST`` decides (see ``agentfleet.approvals.links`` and ``approval_routes``).

The link's signature is the credential: no session, no token, no CSRF token (a forged form
would need the signature, which is the secret itself). A link that does not check out is
answered 403 and says why; one whose approval was decided already shows that decision, who
made it and when (409 to a POST). The pages carry the console's security headers (no
script, no framing) and pass the redactor.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentfleet.approvals.links import valid
from agentfleet.approvals.model import Approval
from agentfleet.config import Settings
from agentfleet.errors import ApprovalAlreadyDecided, ApprovalExpired, ApprovalNotFound
from agentfleet.orchestration import Fleet
from agentfleet.service.console.render import Renderer

__all__ = ["link_routes"]

_MAX_FORM_BYTES = 16 * 1024
_TEXT = 2000
_NOTICES = {
    200: "Decided. The item resumes with this decision.",
    409: "This approval was decided already: the first decision stands.",
    410: "This approval's timeout passed before your decision: the timeout decided.",
}


async def _form(request: Request) -> dict[str, str]:
    body = b""
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM_BYTES:
                raise ValueError(f"the form is larger than {_MAX_FORM_BYTES} bytes")
    except ClientDisconnect:
        raise ValueError("the form did not arrive in time") from None
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


class _LinkPages:
    """The link's handlers: the page, and the form's answer, deciding through ``fleet``."""

    def __init__(self, settings: Settings, fleet: Fleet) -> None:
        self.settings = settings
        self.fleet = fleet
        self.renderer = Renderer(settings)

    def page(self, request: Request, status_code: int, **context: Any) -> Response:
        context.setdefault("error", "")
        context.setdefault("approval", None)
        context.setdefault("done", False)
        context.setdefault("notice", "")
        context.setdefault("expires", "")
        context.setdefault("sig", "")
        return self.renderer.page(
            request, "approval_link.html", status_code, action=request.url.path, **context
        )

    def look(self, approval_id: str) -> Approval | None:
        try:
            return self.fleet.approval_store.get(approval_id)
        except ApprovalNotFound:
            return None

    async def show(self, request: Request) -> Response:
        approval_id = request.path_params["approval_id"]
        expires = request.query_params.get("expires", "")
        sig = request.query_params.get("sig", "")
        problem = valid(self.settings, approval_id, expires, sig)
        if problem is not None:
            return self.page(request, 403, error=problem)
        try:
            found = await run_in_threadpool(self.look, approval_id)
        except (redis.RedisError, OSError) as exc:
            return self.page(request, 503, error=f"Redis does not answer: {exc}")
        return self.page(request, 200 if found else 404, approval=found, expires=expires, sig=sig)

    def decide(self, approval_id: str, form: dict[str, str]) -> tuple[int, Approval | None]:
        by = form.get("by", "").strip()[:200] or "signed link"
        comment = form.get("comment", "").strip()[:_TEXT] or None
        try:
            if form.get("decision") == "approve":
                return 200, self.fleet.approve(approval_id, by=by, comment=comment)
            return 200, self.fleet.reject(approval_id, by=by, comment=comment)
        except ApprovalNotFound:
            return 404, None
        except ApprovalAlreadyDecided as exc:
            return 409, exc.approval
        except ApprovalExpired as exc:
            return 410, exc.approval

    async def answer(self, request: Request) -> Response:
        approval_id = request.path_params["approval_id"]
        try:
            form = await _form(request)
        except ValueError as exc:
            return self.page(request, 413, error=str(exc))
        problem = valid(self.settings, approval_id, form.get("expires", ""), form.get("sig", ""))
        if problem is not None:
            return self.page(request, 403, error=problem)
        if form.get("decision") not in ("approve", "reject"):
            return self.page(request, 422, error="choose Approve or Reject")
        try:
            status, decided = await run_in_threadpool(self.decide, approval_id, form)
        except (redis.RedisError, OSError) as exc:
            return self.page(request, 503, error=f"Redis does not answer: {exc}")
        return self.page(request, status, approval=decided, done=True, notice=_NOTICES.get(status, ""))


def link_routes(settings: Settings, fleet: Fleet) -> list[BaseRoute]:
    """The two routes of the signed link, deciding through ``fleet``."""
    pages = _LinkPages(settings, fleet)
    return [
        Route("/approvals/{approval_id}/decide", pages.show, methods=["GET"]),
        Route("/approvals/{approval_id}/decide", pages.answer, methods=["POST"]),
    ]
