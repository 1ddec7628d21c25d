"""The console's actions (POST): sign in and out (here or everywhere), cancel a run, requeue
and purge dead letters.

The guard in ``routes`` has checked the session, the CSRF token and the origin before any of
these runs (sign-in checks its own double-submit token). A requeue or purge names its
entries by id, or by the same filters the queue page uses; a purge also needs the box
confirming it ticked, and never runs on an empty selection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from agentfleet.service.console.auth import (
    Session,
    check_token,
    end_every_session,
    end_session,
    start_session,
)
from agentfleet.service.guard import mark_authenticated

if TYPE_CHECKING:
    from agentfleet.service.console.routes import Console, Form

__all__ = ["cancel_run", "login", "logout", "logout_everywhere", "purge", "requeue"]

_FILTERS = ("category", "downstream", "fingerprint", "run", "since")


def _one(form: Form, name: str) -> str:
    return (form.get(name) or [""])[0].strip()


def _safe_next(base: str, wanted: str) -> str:
    """Where to go after signing in: a path inside the console, never another site."""
    parts = urlsplit(wanted)
    if parts.scheme or parts.netloc or not wanted.startswith(f"{base}/") or wanted.startswith("//"):
        return f"{base}/runs"
    return wanted


def login(console: Console, request: Request, form: Form) -> Response:
    base = request.scope.get("root_path", "")
    wanted = _one(form, "next")
    if not check_token(console.settings, _one(form, "token")):
        return console.page(
            request,
            "login.html",
            None,
            401,
            csrf=_one(form, "csrf"),
            next=wanted,
            error="That is not the service token (AGENTFLEET_SERVICE__TOKEN).",
        )
    mark_authenticated(request.scope)
    response = RedirectResponse(_safe_next(base, wanted), status_code=303)
    start_session(request, response, console.settings, console.sessions)
    return response


def logout(console: Console, request: Request, session: Session, form: Form) -> Response:
    """End this session, on the server as well as in the browser."""
    response = RedirectResponse(f"{request.scope.get('root_path', '')}/login", status_code=303)
    end_session(request, response, session, console.sessions)
    return response


def logout_everywhere(console: Console, request: Request, session: Session, form: Form) -> Response:
    """End every console session (every browser, every copied cookie)."""
    response = RedirectResponse(f"{request.scope.get('root_path', '')}/login", status_code=303)
    end_every_session(request, response, console.sessions)
    return response


def cancel_run(console: Console, request: Request, session: Session, form: Form) -> Response:
    run_id = request.path_params["run_id"]
    console.data.cancel(run_id)
    return RedirectResponse(f"{request.scope.get('root_path', '')}/runs/{run_id}", status_code=303)


def _selection(form: Form) -> tuple[list[str], dict[str, str]]:
    ids = [i for i in form.get("id", []) if i]
    return ids, {name: _one(form, name) for name in _FILTERS}


def requeue(console: Console, request: Request, session: Session, form: Form) -> Response:
    ids, params = _selection(form)
    flt, _ = console.data.dlq_filter(params)
    results, gone = console.data.requeue(ids, flt, dry_run=False)
    return console.page(request, "requeue.html", session, results=results, gone=gone, done=True)


def purge(console: Console, request: Request, session: Session, form: Form) -> Response:
    """Delete exactly the entries the confirmation page listed (by id), once confirmed."""
    ids = [i for i in form.get("id", []) if i]
    if not ids:
        return console.problem(request, session, "Nothing to purge: no entries were named.", 422)
    if _one(form, "confirm") != "yes":
        entries = console.data.selected(ids, console.data.dlq_filter({})[0])
        return console.page(
            request,
            "purge.html",
            session,
            422,
            entries=entries,
            purged=None,
            error="Tick the box to confirm: purged entries are gone for good.",
        )
    purged = console.data.purge(ids)
    return console.page(request, "purge.html", session, entries=[], purged=purged, asked=len(ids))
