"""The ASGI app of ``agentfleet serve`` (Starlette).

- ``GET /health``: status (ok, degraded, stale) and the figures behind it, as JSON. Answers
  200 whatever the fleet's status, so a probe of this service is not a probe of the fleet;
  503 only when Redis cannot be reached.
- ``GET /metrics``: every collector's samples as Prometheus text (``prometheus_client``),
  with ``agentfleet_up``; 200 even when Redis is down (then ``agentfleet_up 0``).
- ``GET /runs``: the newest runs' summaries (``?limit=``, default 20), with the bearer token.
- ``POST /runs``: ``{"fanout": NAME, "inputs": [{...}, ...], ...run options}`` starts the
  fan-out ``NAME`` defined in ``agentfleet.toml`` (``[fanouts.NAME]`` or ``[schedules.NAME]``)
  with those inputs (default: its own) and any run option (``RunOptions``) over the fan-out's
  own, held to the outside caller's rules (``outside.py``); answers 202 with the run id.
  Needs ``Authorization: Bearer <service.token>``; with no token configured the trigger is
  off (403).
- ``GET /runs/{id}``: the run's summary, with the same bearer token (the run routes are in
  ``run_routes.py``).
- ``GET /dlq/{id}/artifacts`` and ``GET /dlq/{id}/artifacts/{name}``: a dead letter's
  artifacts, listed and one of them, with the same bearer token (``dlq_routes.py``).
- ``/approvals``, ``/approvals/{id}``, ``/events/{key}`` and each approval's signed link:
  deciding what parked items wait for (``approval_routes.py``, docs/approvals-deciding.md).
- ``/console``: the operator's console (``agentfleet.service.console``), signed in with the
  same token; its banner reads the fleet as ``/health`` does (``trouble.py``).

/health and /metrics need no token: probes and scrapers reach them, so expose this service
only where those may. Both answer in milliseconds: they read what the workers keep in Redis
(heartbeats, counters, limiter state) on a client that waits at most
``service.probe_timeout_s`` and never retries, and ping no worker.

Every request that shows a token (or signs in to the console) passes the guard first
(``guard.py``): after ``service.auth_free_failures`` failed checks from one address, that
address is answered 429 with ``Retry-After``, for longer after each further failure. What
the routes return passes the redactor (a run's name, say).

Bad requests are refused with a JSON body ``{"error": "<one message>"}``, never a 500: a body
over ``service.max_body_bytes`` answers 413 (before it is read, when its length is declared),
JSON nested deeper than ``service.max_json_depth`` answers 422, and so does anything else
wrong with the body (``NaN`` and ``Infinity`` included). Unknown paths and methods answer 404
and 405 in the same shape; an unexpected failure is logged and answers 500 with a message
that holds no detail.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence

import redis
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from agentfleet.access import AuthThrottle
from agentfleet.config import Settings
from agentfleet.orchestration import Fleet
from agentfleet.redis_client import broker_client, state_client
from agentfleet.registry import WorkerRecord, WorkerRegistry
from agentfleet.runs import RunStore
from agentfleet.service.approval_routes import approval_routes
from agentfleet.service.collectors import DEFAULT_COLLECTORS, Collected, Collector, collect
from agentfleet.service.console import create_console
from agentfleet.service.dlq_routes import dlq_routes
from agentfleet.service.guard import AuthGuard
from agentfleet.service.health import PendingClock, assess
from agentfleet.service.http_answers import json_error, token_refusal, unavailable
from agentfleet.service.prometheus import CONTENT_TYPE, render
from agentfleet.service.run_routes import RunRoutes
from agentfleet.service.trouble import TroubleWatch

__all__ = ["ServiceState", "create_app"]

log = logging.getLogger("agentfleet.service")


class ServiceState:
    """What the routes share: settings, one ``Fleet``, the collectors and the pending clock.

    The collectors read through ``store``, ``registry`` and ``broker``, on Redis clients of their
    own that give up after ``service.probe_timeout_s`` seconds, without retries.
    """

    def __init__(self, settings: Settings, *, collectors: Sequence[Collector] = DEFAULT_COLLECTORS) -> None:
        self.settings = settings
        self.fleet = Fleet(settings)
        self.collectors = tuple(collectors)
        self.clock = PendingClock()
        wait_s = settings.service.probe_timeout_s
        client = state_client(settings, probe_timeout_s=wait_s)
        self.store = RunStore.from_settings(settings, client)
        self.registry = WorkerRegistry.from_settings(settings, client)
        # The broker's queues, which ``state_url`` may put apart from the store, probed alike.
        self.broker = broker_client(settings, probe_timeout_s=wait_s)

    def live_workers(self) -> list[WorkerRecord]:
        return self.registry.live()

    def collect(self) -> Collected:
        """Every collector's samples; raises ``redis.RedisError`` when Redis does not answer."""
        self.store.client.ping()
        return collect(self, self.collectors)

    def close(self) -> None:
        self.fleet.close()

    @contextlib.asynccontextmanager
    async def lifespan(self, _: Starlette) -> AsyncIterator[None]:
        """The app's lifespan: closes the fleet when the server stops."""
        try:
            yield
        finally:
            self.close()


async def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
    return json_error(str(detail), status)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return json_error("internal error; the service log has the details", 500)


def create_app(settings: Settings, *, collectors: Sequence[Collector] = DEFAULT_COLLECTORS) -> Starlette:
    """The service for ``settings``; ``collectors`` default to every built-in one."""
    state = ServiceState(settings, collectors=collectors)
    watch = TroubleWatch(settings, state, state.collectors, state.clock, ping=state.store.client.ping)

    def health(request: Request) -> Response:
        try:
            collected = state.collect()
        except (redis.RedisError, OSError) as exc:
            return unavailable(exc)
        return JSONResponse(
            assess(
                collected,
                state.clock,
                stale_after_s=settings.service.stale_after_s,
                pause_notice_s=settings.limiter.pause_notice_s,
            )
        )

    def metrics(request: Request) -> Response:
        try:
            collected = state.collect()
        except (redis.RedisError, OSError):
            return Response(render([], up=False), media_type=CONTENT_TYPE)
        return Response(render(collected.samples), media_type=CONTENT_TYPE)

    app = Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
            *RunRoutes(settings, state.fleet).routes(),
            *dlq_routes(state.fleet, settings, token_refusal),
            *approval_routes(settings, state.fleet),
            Mount("/console", app=create_console(settings, state.fleet, trouble=watch.now)),
        ],
        lifespan=state.lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _unexpected},
        middleware=[
            Middleware(AuthGuard, throttle=AuthThrottle.from_settings(settings, state.fleet.store.client))
        ],
    )
    app.state.service = state
    return app
