"""Sandboxed fleet tasks the sandbox integration tests run on real workers."""

from __future__ import annotations

import os
from typing import Any

from agentfleet import SandboxLimits, SandboxSpec, TaskContext, fleet_task


@fleet_task(sandbox=SandboxSpec(limits=SandboxLimits(wall_s=20, processes=64, memory_mb=512)))
def sandboxed_sh(ctx: TaskContext, script: str, timeout_s: float = 20.0) -> dict[str, Any]:
    """Runs ``script`` in the item's sandbox; says what the workspace held before, and its owner
    (the sandbox's host user)."""
    workspace = ctx.sandbox.workspace
    before = sorted(os.listdir(workspace))
    result = ctx.sandbox.run(["sh", "-c", script], timeout_s=timeout_s)
    return {
        "before": before,
        "owner": os.stat(workspace).st_uid,
        "workspace": str(workspace),
        **result.model_dump(),
    }


@fleet_task(max_retries=0)
def no_sandbox(ctx: TaskContext) -> str:
    return ctx.sandbox.run(["true"]).stdout


@fleet_task(sandbox={"limits": {"wall_s": 20}})
def agent_command(ctx: TaskContext, argv: list[str]) -> dict[str, Any]:
    """What the agent's ``run_command`` tool returns for ``argv`` in this item."""
    from agentfleet.tasks.llm_tasks import BUILTIN_TOOLS

    result: dict[str, Any] = BUILTIN_TOOLS["run_command"].fn(ctx, {"argv": argv})
    return result


# The port of the test's HTTP server, given to the workers before they import this module.
_ECHO = f"127.0.0.1:{os.environ.get('SBX_TEST_ECHO_PORT', '1')}"


@fleet_task(sandbox={"network": [_ECHO], "limits": {"wall_s": 30}})
def fetch_in_sandbox(ctx: TaskContext, urls: list[str]) -> list[str]:
    """What python3's urllib, in the item's sandbox, gets for each url (or its error)."""
    code = (
        "import sys, urllib.request\n"
        "for url in sys.argv[1:]:\n"
        " try:\n  print(urllib.request.urlopen(url, timeout=10).status)\n"
        " except Exception as e:\n  print(type(e).__name__)\n"
    )
    result = ctx.sandbox.run(["python3", "-c", code, *urls])
    return result.stdout.split()
