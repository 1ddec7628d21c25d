"""Fleet tasks the integration tests run on real workers (imported via AGENTFLEET_TASK_MODULES)."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from agentfleet import PermanentError, TaskContext, fleet_task


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"], decode_responses=True)


@fleet_task
def echo(ctx: TaskContext, n: int) -> dict[str, Any]:
    return {"n": n}


@fleet_task
def sleepy(ctx: TaskContext, n: int, sleep_s: float) -> dict[str, Any]:
    time.sleep(sleep_s)
    return {"n": n, "slept": sleep_s}


@fleet_task
def counted(ctx: TaskContext, token: str, sleep_s: float = 0.0) -> dict[str, Any]:
    """Counts its executions in Redis under ``test:exec:{token}``: the side effect to watch."""
    executions = _redis().incr(f"test:exec:{token}")
    time.sleep(sleep_s)
    return {"token": token, "executions": executions}


@fleet_task
def maybe_fail(ctx: TaskContext, n: int, fail: bool = False) -> dict[str, Any]:
    if fail:
        raise PermanentError(f"item {n} is broken")
    return {"n": n, "findings": [{"id": n % 7, "severity": ["low", "high"][n % 2]}]}


@fleet_task
def stage_fetch(ctx: TaskContext, url: str) -> dict[str, Any]:
    return {"url": url, "text": f"content of {url}"}


@fleet_task
def stage_extract(ctx: TaskContext, url: str, text: str) -> dict[str, Any]:
    return {"url": url, "words": len(text.split())}


@fleet_task
def stage_report(ctx: TaskContext, url: str, words: int) -> dict[str, Any]:
    if "broken" in url:
        raise PermanentError("cannot report on a broken page")
    return {"report": f"{url}: {words} words"}


def sum_n(results: list[dict[str, Any]]) -> int:
    return sum(r["n"] for r in results)


def count_results(results: list[Any]) -> int:
    return len(results)


@fleet_task
def maybe_fail_slowly(ctx: TaskContext, n: int, fail: bool = False, sleep_s: float = 0.0) -> dict[str, Any]:
    if fail:
        raise PermanentError(f"item {n} is broken")
    time.sleep(sleep_s)
    return {"n": n}


@fleet_task
def use_workdir(ctx: TaskContext, write: bool) -> dict[str, Any]:
    """Writes a file in the scratch directory when asked; reports whether one was made."""
    if not write:
        # Internal state on purpose: reading ``ctx.workdir`` would make the directory.
        return {"made": ctx._execution.workdir_path is not None}
    (ctx.workdir / "note.txt").write_text("scratch")
    path = ctx.workdir
    return {"made": path.is_dir(), "path": str(path)}


@fleet_task
def timed(ctx: TaskContext, n: int, sleep_s: float) -> dict[str, Any]:
    """Sleeps; reports when it ran (Unix seconds), to measure how many ran at once."""
    started = time.time()
    time.sleep(sleep_s)
    return {"n": n, "start": started, "end": time.time()}


@fleet_task
def effect(ctx: TaskContext, token: str, sleep_s: float = 0.0) -> dict[str, Any]:
    """Counts at the far end, outside Redis (which the fault tests kill): one line per body
    execution in ``$AGENTFLEET_TEST_EFFECTS/executions``, and one effect file per idempotency
    key, applied only if absent, as an API that honours idempotency keys would."""
    root = Path(os.environ["AGENTFLEET_TEST_EFFECTS"])
    with open(root / "executions", "a") as log:
        log.write(token + "\n")
    time.sleep(sleep_s)
    name = hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:32]
    # Written whole, then linked into place: a worker killed mid-write leaves no half effect
    # (an empty file once stood for an effect whose write a SIGKILL had cut).
    draft = root / f".draft-{uuid.uuid4().hex}"
    draft.write_text(token)
    try:
        os.link(draft, root / f"effect-{name}")
    except FileExistsError:
        return {"token": token, "applied": False}
    finally:
        draft.unlink()
    return {"token": token, "applied": True}


@fleet_task
def paced(ctx: TaskContext, token: str, sleep_s: float, check: bool = False) -> dict[str, Any]:
    """Sleeps ``sleep_s`` in slices of 0.1 s, asking ``ctx.check_claim()`` between them when
    ``check``. Counts at the far end, in ``$AGENTFLEET_TEST_EFFECTS/paced``: one line per body
    execution's ``start``, ``end`` (it returned) or ``stopped`` (its claim was lost), with the
    token, the worker's node name and the time."""
    from celery import current_task

    from agentfleet import ClaimLost

    node = str(current_task.request.hostname or "").split("@")[0]
    path = Path(os.environ["AGENTFLEET_TEST_EFFECTS"]) / "paced"

    def note(event: str) -> None:
        with open(path, "a") as log:
            log.write(f"{event} {token} {node} {time.time():.3f}\n")

    note("start")
    deadline = time.monotonic() + sleep_s
    try:
        while time.monotonic() < deadline:
            if check:
                ctx.check_claim()
            time.sleep(0.1)
    except ClaimLost:
        note("stopped")
        raise
    note("end")
    return {"token": token, "node": node}
