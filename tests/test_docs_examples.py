"""Every Python and shell example of the README and the docs, run as written, against a real
Redis, real worker processes and the mock Messages API (see tests/doc_examples.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_examples import DocumentRun, blocks_of

from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.mock_llm import MockMessagesServer

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO)))
def test_every_example_runs_as_written(document: Path, tmp_path: Path) -> None:
    blocks = blocks_of(document.read_text())
    # A document whose examples give the password PASSWORD gets a Redis that requires it.
    password = "PASSWORD" if any(":PASSWORD@" in block.text for block in blocks if block.runs) else None
    with EmbeddedRedis(password=password) as redis, MockMessagesServer() as mock:
        run = DocumentRun(tmp_path, redis.url, mock.url)
        try:
            for block in blocks:
                if block.runs or block.file_path is not None:
                    run.run(block)
            run.check_scripts_used(blocks)
        finally:
            run.stop_servers()


def test_make_demo_shows_a_run_and_its_dead_letters() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFLEET_", "ANTHROPIC_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    out = subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Dispatched run" in out.stdout
    assert "the dead-letter queue of run" in out.stdout
    # Its closing hint says the Redis is gone, not to look things up in it, and how to keep one.
    closing = " ".join(out.stdout[out.stdout.rindex("The embedded Redis") :].split())
    assert "stopped with the demo" in closing and "To keep a fleet running" in closing
    assert "`agentfleet dev`" in closing
    assert "agentfleet worker --pool gevent --concurrency 200" in closing
