"""The autoscaling agent worker: a gevent pool, patched in time, that grows and shrinks.

Blocking calls through redis-py, httpx, httpx2 and the Anthropic SDK run concurrently on a
gevent worker only if the standard library was patched before those libraries were imported:
ten 1-second calls then take about 1 s, not 10 s.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis
from ops_support import wait_for
from worker_env import cluster_env

from agentfleet import LocalCluster

pytestmark = pytest.mark.slow

MIN_POOL, MAX_POOL = 10, 40
CALL_S = 1.0


class _SlowHandler(BaseHTTPRequestHandler):
    """Answers after CALL_S seconds: GET with a JSON object, POST as the Messages API does."""

    def _answer(self, body: dict[str, Any]) -> None:
        time.sleep(CALL_S)
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer({"ok": True})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self._answer(
            {
                "id": "msg_test",
                "type": "message",
                "role": "assistant",
                "model": "claude-haiku-4-5",
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 3, "output_tokens": 1},
            }
        )

    def log_message(self, *args: Any) -> None:
        return None


@pytest.fixture(scope="module")
def slow_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture(scope="module")
def cluster(slow_server: str) -> Iterator[LocalCluster]:
    env = cluster_env(
        AGENTFLEET_TASK_MODULES="ops_test_tasks",
        AGENTFLEET_LLM__BASE_URL=slow_server,
        AGENTFLEET_LLM__API_KEY="test-key",
        AGENTFLEET_WORKER__AUTOSCALE_KEEPALIVE_S="1",
        AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS='["127.0.0.1"]',
    )
    # A gevent worker spends seconds in garbage collection after its warm shutdown; by then
    # nothing is left to lose, so it is not waited for long.
    with LocalCluster(
        workers=1, pool="gevent", autoscale=f"{MAX_POOL},{MIN_POOL}", env=env, stop_timeout_s=2
    ) as running:
        yield running


def _autoscaler(cluster: LocalCluster) -> dict[str, int] | None:
    """The worker's own autoscaler figures (max, min, current, qty) from ``inspect().stats()``."""
    stats = cluster.fleet().app.control.inspect(destination=[cluster.workers[0].name], timeout=1.0).stats()
    if not stats:
        return None
    found: dict[str, int] = stats[cluster.workers[0].name]["autoscaler"]
    return found


def test_the_worker_is_gevent_with_the_standard_library_patched(cluster: LocalCluster) -> None:
    run = cluster.fleet().map("ops_test_tasks.patch_report", [{}])
    assert run.wait(timeout_s=60).succeeded == 1
    report = run.outcomes()[0].result
    assert report["patched"] == {"socket": True, "ssl": True, "select": True, "time": True, "threading": True}
    assert "MonkeyPatchWarning" not in cluster.workers[0].log_text(), (
        "patched after ssl or socket was imported"
    )


@pytest.mark.parametrize("client", ["redis", "httpx", "httpx2", "anthropic"])
def test_blocking_calls_run_concurrently(cluster: LocalCluster, slow_server: str, client: str) -> None:
    if client == "redis":
        inputs = [{"n": i, "block_s": int(CALL_S)} for i in range(MIN_POOL)]
        task = "ops_test_tasks.redis_block"
    else:
        inputs = [{"n": i, "url": slow_server, "client": client} for i in range(MIN_POOL)]
        task = "ops_test_tasks.http_call"
    started = time.monotonic()
    summary = cluster.fleet().map(task, inputs).wait(timeout_s=90)
    elapsed = time.monotonic() - started
    assert summary.succeeded == MIN_POOL, summary
    # One after another these take at least 10 s; concurrently about 1 s plus this machine's load.
    assert elapsed < MIN_POOL * CALL_S * 0.8, f"{MIN_POOL} calls of {CALL_S} s took {elapsed:.1f} s"


def test_the_pool_grows_under_a_backlog_and_shrinks_back_after(cluster: LocalCluster) -> None:
    idle = wait_for(lambda: _autoscaler(cluster), timeout_s=30, what="worker stats")
    assert idle["min"] == MIN_POOL and idle["max"] == MAX_POOL
    wait_for(
        lambda: (_autoscaler(cluster) or {}).get("current") == MIN_POOL, timeout_s=30, what="an idle pool"
    )

    run = cluster.fleet().map("ops_test_tasks.nap", [{"n": i, "sleep_s": 0.3} for i in range(200)])
    grown = wait_for(
        lambda: (s := _autoscaler(cluster)) and s["current"] > MIN_POOL and s,
        timeout_s=60,
        interval_s=0.2,
        what="the pool to grow above its minimum",
    )
    assert MIN_POOL < grown["current"] <= MAX_POOL
    assert run.wait(timeout_s=120).succeeded == 200
    # Every message was acknowledged: none is left for a redelivery an hour from now.
    broker = redis.Redis.from_url(cluster.broker_url)
    try:
        wait_for(lambda: broker.hlen("unacked") == 0, timeout_s=10, what="every message acknowledged")
    finally:
        broker.close()
    assert "Couldn't ack" not in cluster.workers[0].log_text()
    shrunk = wait_for(
        lambda: (s := _autoscaler(cluster)) and s["current"] == MIN_POOL and s,
        timeout_s=60,
        what="the pool to shrink back to its minimum",
    )
    assert shrunk["qty"] == 0
