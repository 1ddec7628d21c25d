"""The service's routes for a dead letter's artifacts, behind the bearer token.

- ``GET /dlq/{id}/artifacts``: the entry's artifacts (name, size, type, whether cut), as JSON.
- ``GET /dlq/{id}/artifacts/{name}``: one artifact's kept bytes (``artifact_response``: an
  image inline, anything else as an attachment, never HTML or SVG as such).

An id may be the first characters of one entry's id, as on the command line. An unknown
entry or artifact answers 404; an id several entries start with, 422.
"""

from __future__ import annotations

from collections.abc import Callable

import redis
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentfleet.config import Settings
from agentfleet.errors import ConfigError, DeadLetterNotFound
from agentfleet.orchestration import Fleet
from agentfleet.service.artifact_response import artifact_response

__all__ = ["dlq_routes"]

Authorize = Callable[[Request, Settings], Response | None]


def _error(message: str, status_code: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status_code)


def dlq_routes(fleet: Fleet, settings: Settings, authorize: Authorize) -> list[Route]:
    """The routes, reading through ``fleet``; ``authorize`` refuses a request without the
    service token (returning the refusal) or lets it through (None)."""

    def answer(request: Request, read: Callable[[], Response]) -> Response:
        refused = authorize(request, settings)
        if refused is not None:
            return refused
        try:
            return read()
        except DeadLetterNotFound as exc:
            return _error(str(exc), 404)
        except ConfigError as exc:
            return _error(str(exc), 422)
        except (redis.RedisError, OSError) as exc:
            return _error(f"Redis does not answer: {exc}", 503)

    def list_artifacts(request: Request) -> Response:
        def read() -> Response:
            entry = fleet.dlq.get(request.path_params["entry_id"])
            listed = [a.model_dump(mode="json") for a in entry.artifacts]
            return JSONResponse({"id": entry.id, "artifacts": listed})

        return answer(request, read)

    def one_artifact(request: Request) -> Response:
        def read() -> Response:
            found, data = fleet.dlq.artifact(request.path_params["entry_id"], request.path_params["name"])
            return artifact_response(found, data)

        return answer(request, read)

    return [
        Route("/dlq/{entry_id}/artifacts", list_artifacts, methods=["GET"]),
        Route("/dlq/{entry_id}/artifacts/{name:path}", one_artifact, methods=["GET"]),
    ]
