"""``POST /runs``, ``GET /runs`` and ``GET /runs/{id}``: starting a fan-out by name and reading
runs, behind the service token (see ``service/app.py``)."""

from __future__ import annotations

from typing import Any

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentfleet.config import Settings
from agentfleet.errors import ConfigError, DispatchError, InvalidInput
from agentfleet.orchestration import Fleet
from agentfleet.service.http_answers import json_error, token_refusal, unavailable
from agentfleet.service.outside import start_for_caller
from agentfleet.service.request_body import read_json_body

__all__ = ["RunRoutes", "read_trigger"]


async def read_trigger(
    request: Request, settings: Settings
) -> tuple[str, list[dict[str, Any]] | None, dict[str, Any]]:
    """The fan-out name, inputs and run options of a ``POST /runs`` body.

    Raises ``InvalidInput`` (with its HTTP status) for a body over the limits, and
    ``ValueError`` for anything else unusable.
    """
    document = await read_json_body(
        request, max_bytes=settings.service.max_body_bytes, max_depth=settings.service.max_json_depth
    )
    if not isinstance(document, dict) or not isinstance(document.get("fanout"), str):
        raise ValueError('send {"fanout": "<name>", "inputs": [{...}, ...]} and any run options')
    inputs = document.get("inputs")
    if inputs is not None:
        if not isinstance(inputs, list) or not all(isinstance(item, dict) for item in inputs):
            raise ValueError("inputs must be a list of JSON objects (keyword arguments)")
        cap = settings.service.max_inputs
        if len(inputs) > cap:
            raise ValueError(f"{len(inputs)} inputs is more than service.max_inputs ({cap})")
    options = {k: v for k, v in document.items() if k not in ("fanout", "inputs")}
    return document["fanout"], inputs, options


class RunRoutes:
    """The run routes of one service, reading and starting runs through ``fleet``; what they
    return passes the settings' redactor."""

    def __init__(self, settings: Settings, fleet: Fleet) -> None:
        self.settings = settings
        self.fleet = fleet
        self.redactor = settings.redactor()

    def routes(self) -> list[Route]:
        return [
            Route("/runs", self.start_run, methods=["POST"]),
            Route("/runs", self.list_runs, methods=["GET"]),
            Route("/runs/{run_id}", self.show_run, methods=["GET"]),
        ]

    def list_runs(self, request: Request) -> Response:
        if (refused := token_refusal(request, self.settings)) is not None:
            return refused
        raw = request.query_params.get("limit", "20")
        if not raw.isdigit() or not 1 <= int(raw) <= 1000:
            return json_error("limit must be a whole number from 1 to 1000", 422)
        try:
            summaries = self.fleet.runs(int(raw))
        except (redis.RedisError, OSError) as exc:
            return unavailable(exc)
        return JSONResponse(
            {"runs": [self.redactor.value(summary.model_dump(mode="json")) for summary in summaries]}
        )

    async def start_run(self, request: Request) -> Response:
        if (refused := token_refusal(request, self.settings)) is not None:
            return refused
        try:
            name, inputs, options = await read_trigger(request, self.settings)
        except InvalidInput as exc:
            return json_error(exc.message, exc.status_code or 422)
        except ValueError as exc:
            return json_error(str(exc), 422)
        try:
            run = await run_in_threadpool(start_for_caller, self.fleet, name, inputs, options)
        except ConfigError as exc:
            return json_error(str(exc), 404)
        except DispatchError as exc:
            return json_error(str(exc), 422)
        except (redis.RedisError, OSError) as exc:
            return json_error(f"Redis does not answer: {exc}", 503)
        return JSONResponse(
            {
                "run_id": run.id,
                "fanout": self.redactor.text(name),
                "tasks": run.total,
                "summary_url": f"/runs/{run.id}",
            },
            status_code=202,
        )

    def show_run(self, request: Request) -> Response:
        if (refused := token_refusal(request, self.settings)) is not None:
            return refused
        try:
            summary = self.fleet.get_run(request.path_params["run_id"]).summary()
        except DispatchError as exc:
            return json_error(str(exc), 404)
        except (redis.RedisError, OSError) as exc:
            return json_error(f"Redis does not answer: {exc}", 503)
        return JSONResponse(self.redactor.value(summary.model_dump(mode="json")))
