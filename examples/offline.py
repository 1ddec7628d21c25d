"""What every example needs to run on one machine with no network: a mock LLM and a cluster.

``offline_fleet(...)`` starts ``agentfleet mock-llm`` (unless ``ANTHROPIC_API_KEY`` or
``AGENTFLEET_LLM__BASE_URL`` says to use a real endpoint) and a ``LocalCluster`` (an
embedded Redis unless ``AGENTFLEET_BROKER_URL`` answers, and real worker processes) whose
workers import the example's task module from this directory. Everything it started is
stopped by its pid on the way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.embedded_redis import free_port

__all__ = ["EXAMPLES", "mock_llm", "offline_fleet"]

EXAMPLES = Path(__file__).resolve().parent
AGENTFLEET = Path(sys.executable).parent / "agentfleet"


@contextlib.contextmanager
def mock_llm() -> Iterator[str]:
    """``agentfleet mock-llm`` on a free loopback port, until the block ends; its URL."""
    port = free_port()
    process = subprocess.Popen(
        [str(AGENTFLEET), "mock-llm", "--port", str(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/_mock/stats", timeout=1).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("agentfleet mock-llm did not start")
            time.sleep(0.1)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def offline_fleet(
    task_module: str, *, workers: int = 1, concurrency: int = 8, env: Mapping[str, str] | None = None
) -> Iterator[LocalCluster]:
    """A cluster whose workers import ``task_module`` (a module in ``examples/``), on the mock LLM.

    ``env`` holds settings for the workers and this process alike (``AGENTFLEET_LIMITS``...).
    """
    real = os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("AGENTFLEET_LLM__BASE_URL")
    with contextlib.ExitStack() as stack:
        extra = dict(env or {})
        if not real:
            extra["AGENTFLEET_LLM__BASE_URL"] = stack.enter_context(mock_llm())
        extra["AGENTFLEET_TASK_MODULES"] = task_module
        extra["PYTHONPATH"] = os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])
        # This process reads the same settings as its workers (limits, schedules, budgets).
        previous = {name: os.environ.get(name) for name in extra}
        os.environ.update(extra)
        try:
            cluster = LocalCluster(
                workers=workers, concurrency=concurrency, pool="threads", env=extra, settings=load_settings()
            )
            yield stack.enter_context(cluster)
        finally:
            for name, value in previous.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
