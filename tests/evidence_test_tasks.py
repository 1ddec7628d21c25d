"""Fleet tasks that leave evidence in their workspace and then fail for good (the workers of
tests/test_dlq_artifacts_integration.py import them by name)."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Any

import redis

from agentfleet import TaskContext, fleet_task

FINAL_LINE = b"FINAL LINE: the step that failed\n"


def png(width: int = 4, height: int = 3) -> bytes:
    """A small valid PNG (a screenshot stand-in), grey pixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    rows = b"".join(b"\x00" + b"\x80\x80\x80" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def _note_workspace(ctx: TaskContext, workspace: Path) -> None:
    client = redis.Redis.from_url(os.environ["AGENTFLEET_BROKER_URL"])
    client.set(f"test:workspace:{ctx.run_id}", str(workspace), ex=600)


@fleet_task(max_retries=0)
def leave_evidence(ctx: TaskContext, log_lines: int, note: bool = True) -> dict[str, Any]:
    """Write a screenshot, a long log, a junit report, a link to /etc/passwd and a file with a
    hostile name into the scratch directory, then fail for good. ``note``: say where, in Redis
    (``test:workspace:<run id>``)."""
    work = ctx.workdir
    if note:
        _note_workspace(ctx, work)
    (work / "screens").mkdir()
    (work / "screens" / "fail.png").write_bytes(png())
    (work / "reports").mkdir()
    (work / "reports" / "junit.xml").write_text(
        '<testsuite tests="1" failures="1"><testcase name="t"/></testsuite>'
    )
    with (work / "run.log").open("wb") as log:
        for i in range(log_lines):
            log.write(f"line {i}: working\n".encode())
        log.write(FINAL_LINE)
    (work / "passwd.log").symlink_to("/etc/passwd")
    (work / "<img src=x onerror=alert(1)>.log").write_text("hostile name\n")
    (work / "notes.txt").write_text("not an artifact")
    raise RuntimeError("the checkout page never loaded")


# Written by a program inside the sandbox: a result, a link to the host's /etc/passwd, a log
# the task's own patterns do not name.
_IN_SANDBOX = (
    "mkdir -p out && echo 'partial result' > out/result.txt && ln -s /etc/passwd out/passwd.txt "
    "&& echo 'not named by this task' > run.log"
)


@fleet_task(max_retries=0, sandbox={"artifacts": ["out/*.txt"]})
def sandboxed_failure(ctx: TaskContext) -> dict[str, Any]:
    """A program in the item's sandbox leaves files in its workspace, then the item fails; the
    task's sandbox names its own artifact patterns, which win over the settings'."""
    _note_workspace(ctx, ctx.sandbox.workspace)
    done = ctx.sandbox.run(["sh", "-c", _IN_SANDBOX], timeout_s=60)
    if done.exit_code != 0:
        raise RuntimeError(f"the sandboxed program failed to start: {done.stderr[-500:]}")
    raise RuntimeError("the sandboxed step failed")
