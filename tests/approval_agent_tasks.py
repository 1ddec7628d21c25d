"""An agent whose ``deploy`` tool needs a person's approval (imported by workers via
AGENTFLEET_TASK_MODULES). ``deploy`` POSTs its arguments to the far end (``DURABLE_FAR_END``,
the scripted server in the test process) under its call's idempotency key; ``lookup`` (which
POSTs to ``/lookup``) needs no approval."""

from __future__ import annotations

import os
from typing import Any

from agentfleet import TaskContext, Tool, fleet_task, run_agent

MODEL = "claude-haiku-4-5"
DEPLOY_SCHEMA = {
    "type": "object",
    "properties": {"version": {"type": "string"}, "api_key": {"type": "string"}},
    "required": ["version"],
    "additionalProperties": False,
}


def _post(ctx: TaskContext, path: str, args: dict[str, Any]) -> None:
    url = os.environ["DURABLE_FAR_END"].rstrip("/") + path
    response = ctx.http.post(url, json=args, headers={"Idempotency-Key": ctx.idempotency_key})
    response.raise_for_status()


def _deploy(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    _post(ctx, "/deploy", args)
    return {"deployed": args["version"]}


def _lookup(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    _post(ctx, "/lookup", args)
    return {"current": "v1"}


DEPLOY = Tool("deploy", "Deploys a version.", DEPLOY_SCHEMA, _deploy, requires_approval=True)
LOOKUP = Tool("lookup", "Says what runs now.", {"type": "object", "properties": {}}, _lookup)


@fleet_task(max_retries=2)
def release_agent(ctx: TaskContext, prompt: str) -> dict[str, Any]:
    """The agent: ``deploy`` waits for approval before each call."""
    return run_agent(ctx, prompt=prompt, tools=[DEPLOY, LOOKUP], model=MODEL).as_dict()
