"""The console's artifact files: ``GET /console/dlq/{id}/artifacts/{name}``.

The entry's page shows its image artifacts inline (``<img>`` from this route; the page's
Content-Security-Policy allows images from this service only) and links the rest for download.
This route answers as the service's API does (``agentfleet.service.artifact_response``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

from agentfleet.errors import ConfigError, DeadLetterNotFound
from agentfleet.service.artifact_response import artifact_response
from agentfleet.service.console.auth import Session

if TYPE_CHECKING:
    from agentfleet.service.console.routes import Console

__all__ = ["artifact_file"]


def artifact_file(console: Console, request: Request, session: Session | None) -> Response:
    """One artifact's kept bytes, or the problem page saying why there are none."""
    entry_id, name = request.path_params["entry_id"], request.path_params["name"]
    try:
        found, data = console.data.fleet.dlq.artifact(entry_id, name)
    except DeadLetterNotFound as exc:
        return console.problem(request, session, str(exc), 404)
    except ConfigError as exc:
        return console.problem(request, session, str(exc), 422)
    return artifact_response(found, data)
