"""The console's ASGI app: its routes, the sign-in guard and form reading.

Mounted by the service at ``/console``. Every page needs a signed-in session (or, for
reading, ``Authorization: Bearer <service.token>``: a wrong one answers 401, which the
service's guard counts); every POST needs a session, a CSRF token and a same-origin request
(see ``auth``). With no ``service.token`` configured the console is off and says how to turn
it on. Every page shown to a signed-in operator (or a bearer) carries the banner of what is
wrong with the fleet now (``agentfleet.service.trouble``); the sign-in page and problems
shown before signing in do not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import parse_qsl, quote

import redis
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from agentfleet.access import SessionStore
from agentfleet.config import Settings
from agentfleet.errors import AgentfleetError
from agentfleet.orchestration import Fleet
from agentfleet.service.console import actions, approval_pages, pages
from agentfleet.service.console.artifacts import artifact_file
from agentfleet.service.console.auth import Session, check_token, csrf_ok, read_session, same_origin
from agentfleet.service.console.data import ConsoleData
from agentfleet.service.console.render import Renderer
from agentfleet.service.guard import mark_authenticated
from agentfleet.service.trouble import Trouble

__all__ = ["Console", "Form", "create_console"]

# Enough for the ids of a few thousand entries in one bulk action.
_MAX_FORM_BYTES = 1024 * 1024
_CSS = resources.files("agentfleet.service.console").joinpath("static/console.css").read_bytes()

Form = dict[str, list[str]]
Page = Callable[["Console", Request, Session | None], Response]
Action = Callable[["Console", Request, Session, Form], Response]
Troubles = Callable[[], list[Trouble]]


def _no_trouble() -> list[Trouble]:
    return []


class Console:
    """What the console's handlers share: settings, the data layer, the renderer and what
    says the fleet's trouble for the banner."""

    def __init__(self, settings: Settings, fleet: Fleet, trouble: Troubles = _no_trouble) -> None:
        self.settings = settings
        self.data = ConsoleData(settings, fleet)
        self.renderer = Renderer(settings)
        self.sessions = SessionStore.from_settings(settings, fleet.store.client)
        self.trouble = trouble

    def session(self, request: Request) -> Session | None:
        """The request's live session (raises ``redis.RedisError`` when Redis does not answer)."""
        return read_session(request, self.settings, self.sessions)

    def page(
        self, request: Request, template: str, session: Session | None, status_code: int = 200, **context: Any
    ) -> Response:
        context.setdefault("csrf", session.csrf if session else "")
        if getattr(request.state, "console_reader", False) and "trouble" not in context:
            context["trouble"] = self.trouble()
        return self.renderer.page(request, template, status_code, session=session, **context)

    def problem(self, request: Request, session: Session | None, message: str, status_code: int) -> Response:
        return self.page(request, "problem.html", session, status_code, message=message)


async def read_form(request: Request) -> Form:
    """An ``application/x-www-form-urlencoded`` body; raises ``ValueError`` when too large."""
    body = b""
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM_BYTES:
                raise ValueError(f"the form is larger than {_MAX_FORM_BYTES} bytes")
    except ClientDisconnect:
        raise ValueError("the form did not arrive in time") from None
    form: Form = {}
    for name, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        form.setdefault(name, []).append(value)
    return form


def _bearer(request: Request, settings: Settings) -> bool | None:
    """None when the request shows no token; else whether it is the service token."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, given = header.partition(" ")
    passed = scheme.lower() == "bearer" and check_token(settings, given.strip())
    if passed:
        mark_authenticated(request.scope)
    return passed


def _to_login(request: Request) -> Response:
    base = request.scope.get("root_path", "")
    wanted = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{base}/login?next={quote(wanted, safe='')}", status_code=303)


def _off(console: Console, request: Request) -> Response:
    return console.problem(
        request,
        None,
        "The console is off: set AGENTFLEET_SERVICE__TOKEN (service.token) to turn it on, then sign in "
        "with that token.",
        403,
    )


def _wrong_token(console: Console, request: Request) -> Response:
    return console.problem(request, None, "That bearer token is not the service token.", 401)


def _guarded(console: Console, handler: Page) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        if console.settings.service.token is None:
            return _off(console, request)
        session: Session | None = None
        try:
            session = await run_in_threadpool(console.session, request)
            if session is None:
                bearer = _bearer(request, console.settings)
                if bearer is None:
                    return _to_login(request)
                if not bearer:
                    return _wrong_token(console, request)
            request.state.console_reader = True
            return await run_in_threadpool(handler, console, request, session)
        except (redis.RedisError, OSError) as exc:
            return console.problem(request, session, f"Redis does not answer: {exc}", 503)

    return endpoint


def _action(console: Console, handler: Action) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        if console.settings.service.token is None:
            return _off(console, request)
        try:
            session = await run_in_threadpool(console.session, request)
        except (redis.RedisError, OSError) as exc:
            return console.problem(request, None, f"Redis does not answer: {exc}", 503)
        if session is None:
            return _to_login(request)
        request.state.console_reader = True
        try:
            form = await read_form(request)
        except ValueError as exc:
            return console.problem(request, session, str(exc), 413)
        if not same_origin(request) or not csrf_ok(request, session, (form.get("csrf") or [""])[0]):
            return console.problem(
                request,
                session,
                "This form has expired or came from another site; reload and try again.",
                403,
            )
        try:
            return await run_in_threadpool(handler, console, request, session, form)
        except AgentfleetError as exc:
            return console.problem(request, session, str(exc), 422)
        except (redis.RedisError, OSError) as exc:
            return console.problem(request, session, f"Redis does not answer: {exc}", 503)

    return endpoint


def _stylesheet(request: Request) -> Response:
    return Response(_CSS, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


def _home(request: Request) -> Response:
    return RedirectResponse(f"{request.scope.get('root_path', '')}/runs", status_code=303)


def create_console(settings: Settings, fleet: Fleet, *, trouble: Troubles = _no_trouble) -> Starlette:
    """The console for ``settings``, reading and acting through ``fleet``; ``trouble`` says
    what is wrong with the fleet now, for every page's banner."""
    console = Console(settings, fleet, trouble)

    async def login_page(request: Request) -> Response:
        if settings.service.token is None:
            return _off(console, request)
        return await run_in_threadpool(pages.login_page, console, request)

    async def login(request: Request) -> Response:
        if settings.service.token is None:
            return _off(console, request)
        try:
            form = await read_form(request)
        except ValueError as exc:
            return console.problem(request, None, str(exc), 413)
        if not same_origin(request) or not csrf_ok(request, None, (form.get("csrf") or [""])[0]):
            return console.problem(
                request, None, "The sign-in form has expired; reload it and try again.", 403
            )
        try:
            return await run_in_threadpool(actions.login, console, request, form)
        except (redis.RedisError, OSError) as exc:
            return console.problem(request, None, f"Redis does not answer: {exc}", 503)

    return Starlette(
        routes=[
            Route("/", _home, methods=["GET"]),
            Route("/console.css", _stylesheet, methods=["GET"]),
            Route("/login", login_page, methods=["GET"]),
            Route("/login", login, methods=["POST"]),
            Route("/logout", _action(console, actions.logout), methods=["POST"]),
            Route("/logout/everywhere", _action(console, actions.logout_everywhere), methods=["POST"]),
            Route("/runs", _guarded(console, pages.runs_page), methods=["GET"]),
            Route("/runs/{run_id}", _guarded(console, pages.run_page), methods=["GET"]),
            Route("/runs/{run_id}/timeline", _guarded(console, pages.timeline_page), methods=["GET"]),
            Route("/runs/{run_id}/cancel", _action(console, actions.cancel_run), methods=["POST"]),
            Route("/dlq", _guarded(console, pages.dlq_page), methods=["GET"]),
            Route("/dlq/requeue", _guarded(console, pages.requeue_preview), methods=["GET"]),
            Route("/dlq/requeue", _action(console, actions.requeue), methods=["POST"]),
            Route("/dlq/purge", _guarded(console, pages.purge_confirm), methods=["GET"]),
            Route("/dlq/purge", _action(console, actions.purge), methods=["POST"]),
            Route("/dlq/{entry_id}", _guarded(console, pages.dead_letter_page), methods=["GET"]),
            Route("/dlq/{entry_id}/artifacts/{name:path}", _guarded(console, artifact_file), methods=["GET"]),
            Route("/approvals", _guarded(console, approval_pages.approvals_page), methods=["GET"]),
            Route("/approvals/{approval_id}", _action(console, approval_pages.decide), methods=["POST"]),
            Route("/workers", _guarded(console, pages.workers_page), methods=["GET"]),
            Route("/limits", _guarded(console, pages.limits_page), methods=["GET"]),
            Route("/schedules", _guarded(console, pages.schedules_page), methods=["GET"]),
            Route("/spend", _guarded(console, pages.spend_page), methods=["GET"]),
        ]
    )
