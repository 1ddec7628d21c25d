"""The console's pages (GET): runs (with the fleet's last hour), a run (with its charts), its
timeline, workers, the dead-letter queue, an entry, limits, schedules, spend.

A page about something still moving (a running run and its timeline, the runs list while
any runs, workers, limits) reloads itself every few seconds with a ``<meta
http-equiv="refresh">``: polling, without a script. ``?refresh=0`` stops it, for a screen
reader or a long read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from agentfleet.errors import ConfigError
from agentfleet.service.console.auth import Session, login_nonce, remember_login_nonce
from agentfleet.service.console.data import progress
from agentfleet.service.console.run_data import ITEMS_PAGE, success_rate

if TYPE_CHECKING:
    from agentfleet.service.console.routes import Console

__all__ = [
    "dead_letter_page",
    "dlq_page",
    "limits_page",
    "login_page",
    "purge_confirm",
    "requeue_preview",
    "run_page",
    "runs_page",
    "schedules_page",
    "spend_page",
    "timeline_page",
    "workers_page",
]

REFRESH_S = 5
_SHOW = ("all", "failed", "pending")


def _refresh(request: Request, moving: bool) -> int | None:
    return REFRESH_S if moving and request.query_params.get("refresh") != "0" else None


def login_page(console: Console, request: Request) -> Response:
    """The sign-in form; its CSRF value is a fresh cookie (double submit)."""
    nonce = login_nonce(request)
    response = console.page(
        request, "login.html", None, csrf=nonce, next=request.query_params.get("next", ""), error=""
    )
    remember_login_nonce(request, response, nonce)
    return response


def runs_page(console: Console, request: Request, session: Session | None) -> Response:
    runs = console.data.runs()
    running = any(r.status == "running" for r in runs)
    return console.page(
        request,
        "runs.html",
        session,
        runs=runs,
        totals=console.data.fleet_totals(),
        charts=console.data.fleet_charts(),
        progress=progress,
        refresh=_refresh(request, running),
    )


def run_page(console: Console, request: Request, session: Session | None) -> Response:
    run_id = request.path_params["run_id"]
    show = request.query_params.get("show", "all")
    try:
        page = int(request.query_params.get("page", "1"))
    except ValueError:
        page = 1
    view = console.data.run(run_id, page=page, show=show if show in _SHOW else "all")
    if view is None:
        return console.problem(request, session, f"No run {run_id}: it may have expired.", 404)
    return console.page(
        request,
        "run.html",
        session,
        view=view,
        done=progress(view.summary),
        rate=success_rate(view.summary),
        refresh=_refresh(request, view.summary.status == "running"),
    )


def timeline_page(console: Console, request: Request, session: Session | None) -> Response:
    run_id = request.path_params["run_id"]
    base = request.scope.get("root_path", "")

    def link(index: int) -> str:
        return f"{base}/runs/{run_id}?page={index // ITEMS_PAGE + 1}#item-{index}"

    view = console.data.timeline(run_id, link=link, shown=console.renderer.shown)
    if view is None:
        return console.problem(request, session, f"No run {run_id}: it may have expired.", 404)
    return console.page(
        request,
        "timeline.html",
        session,
        view=view,
        link=link,
        refresh=_refresh(request, view.summary.status == "running"),
    )


def workers_page(console: Console, request: Request, session: Session | None) -> Response:
    return console.page(
        request, "workers.html", session, view=console.data.workers(), refresh=_refresh(request, True)
    )


def _filter_params(request: Request) -> dict[str, str]:
    return {
        k: request.query_params.get(k, "") for k in ("category", "downstream", "fingerprint", "run", "since")
    }


def dlq_page(console: Console, request: Request, session: Session | None) -> Response:
    try:
        flt, since = console.data.dlq_filter(_filter_params(request))
    except ConfigError as exc:
        return console.problem(request, session, str(exc), 422)
    return console.page(request, "dlq.html", session, view=console.data.dlq(flt, since))


def dead_letter_page(console: Console, request: Request, session: Session | None) -> Response:
    entry_id = request.path_params["entry_id"]
    entry = console.data.dead_letter(entry_id)
    if entry is None:
        return console.problem(
            request, session, f"No dead letter {entry_id}: it may have been requeued or purged.", 404
        )
    return console.page(request, "dead_letter.html", session, entry=entry)


def _selection(request: Request) -> tuple[list[str], dict[str, str]]:
    ids = [i for i in request.query_params.getlist("id") if i]
    return ids, _filter_params(request)


def requeue_preview(console: Console, request: Request, session: Session | None) -> Response:
    """What a requeue would do (a dry run), with the button that does it."""
    ids, params = _selection(request)
    try:
        flt, _ = console.data.dlq_filter(params)
        results, gone = console.data.requeue(ids, flt, dry_run=True)
    except ConfigError as exc:
        return console.problem(request, session, str(exc), 422)
    return console.page(request, "requeue.html", session, results=results, gone=gone, done=False)


def purge_confirm(console: Console, request: Request, session: Session | None) -> Response:
    """The entries a purge would delete, and a confirmation the operator must tick."""
    ids, params = _selection(request)
    try:
        flt, _ = console.data.dlq_filter(params)
        entries = console.data.selected(ids, flt)
    except ConfigError as exc:
        return console.problem(request, session, str(exc), 422)
    return console.page(request, "purge.html", session, entries=entries, purged=None, error="")


def limits_page(console: Console, request: Request, session: Session | None) -> Response:
    return console.page(
        request, "limits.html", session, rows=console.data.limits(), refresh=_refresh(request, True)
    )


def schedules_page(console: Console, request: Request, session: Session | None) -> Response:
    return console.page(request, "schedules.html", session, rows=console.data.schedules())


def spend_page(console: Console, request: Request, session: Session | None) -> Response:
    return console.page(request, "spend.html", session, view=console.data.spend())
