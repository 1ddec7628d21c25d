"""``agentfleet dev``: one command starts Redis, a gevent worker, the mock Messages API and the
console, says where they are, takes work, and stops everything on Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
import redis

from agentfleet.config import load_settings
from agentfleet.embedded_redis import free_port
from agentfleet.orchestration import Fleet

pytestmark = pytest.mark.slow


def _read_until(
    proc: subprocess.Popen[str], pattern: str, timeout_s: float = 120.0
) -> tuple[re.Match[str], str]:
    """Lines of ``proc``'s output until one matches ``pattern``: the match and what was read."""
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        found = re.search(pattern, line)
        if found:
            return found, seen
    raise AssertionError(f"no line matched {pattern!r} within {timeout_s} s; read:\n{seen}")


def test_dev_runs_a_whole_fleet_until_ctrl_c() -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTFLEET_", "ANTHROPIC_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentfleet", "dev", "--port", str(port), "--concurrency", "20"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        console_url = _read_until(proc, r"console\s+(http://\S+)")[0].group(1)
        token = _read_until(proc, r"token\s+([0-9a-f]{64})")[0].group(1)
        broker = _read_until(proc, r"export AGENTFLEET_BROKER_URL=(\S+)")[0].group(1)
        assert console_url == f"http://127.0.0.1:{port}/console"
        page = httpx.get(f"{console_url}/runs", headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert page.status_code == 200 and "<h1>Runs</h1>" in page.text
        with Fleet(load_settings(broker_url=broker)) as fleet:
            run = fleet.map("agentfleet.simulated_agent", [{"item": i, "latency_s": 0.05} for i in range(20)])
            assert run.wait(timeout_s=120).succeeded == 20
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
        assert proc.returncode == 0, rest
        assert "stopped the service, the worker, the mock and Redis" in rest
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(broker, socket_connect_timeout=2).ping()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
