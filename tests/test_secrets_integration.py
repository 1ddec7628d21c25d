"""No secret is stored, logged or shown, checked at every far end of a real deployment.

One Redis requiring a password that holds '/', '+' and '=' (percent-encoded in the URL), one
worker, beat and Flower (started as ``celery -A agentfleet.celery_app flower``, the command
that bypasses ``agentfleet flower``). A task asks a server that echoes the credential
``vendor_a`` back, and returns, logs and prints the echo; each process also logs the
credential through a library logger once it is up (``secret_test_tasks``).

The oracles are the far ends: every key and value in Redis, each process's log file,
Flower's pages and API, and what ``celery inspect conf`` answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import httpx
import pytest
import redis
from http_scripted import Hit, Reply, ScriptedServer
from ops_support import BIN, ServiceProcess, http_status, wait_for
from redis_contents import all_contents
from worker_env import TESTS_DIR

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.embedded_redis import free_port, redis_reachable, redis_server_binary

pytestmark = pytest.mark.slow

SECRET = f"sk-live-{uuid.uuid4().hex}"
PASSWORD = f"r/{uuid.uuid4().hex[:12]}+pw=="
FLOWER_AUTH = ("ops", f"flower-{uuid.uuid4().hex}")
TASK = "secret_test_tasks.echo_credential"


def spellings(value: str) -> list[str]:
    """A value as it may be written anywhere: plain, percent- and form-encoded, JSON-escaped."""
    return sorted({value, quote(value, safe=""), quote_plus(value, safe=""), json.dumps(value)[1:-1]})


def leaks(text: str) -> list[str]:
    return [form for value in (SECRET, PASSWORD) for form in spellings(value) if form in text]


@dataclass
class Deployment:
    url: str
    cluster: LocalCluster
    beat: ServiceProcess
    flower: ServiceProcess
    flower_url: str
    echo: ScriptedServer
    outcome: Any


def _redis(logs: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    argv = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(logs), "--requirepass", PASSWORD]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), port


def _environment(url: str) -> dict[str, str]:
    credentials = {"vendor_a": {"env": "VENDOR_A_KEY", "domains": ["127.0.0.1"]}}
    return {
        "AGENTFLEET_BROKER_URL": url,
        "AGENTFLEET_CREDENTIALS": json.dumps(credentials),
        "AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS": '["127.0.0.1"]',
        "AGENTFLEET_TASK_MODULES": "secret_test_tasks",
        "VENDOR_A_KEY": SECRET,
        "PYTHONPATH": TESTS_DIR,
    }


def _echo(hit: Hit) -> Reply:
    return Reply(body=f"you sent {hit.headers.get('x-key', '')}")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    logs = tmp_path_factory.mktemp("secrets")
    server, port = _redis(logs)
    url = f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/0"
    env = _environment(url)
    procs: list[ServiceProcess] = []
    try:
        with pytest.MonkeyPatch.context() as patch, ScriptedServer() as echo:
            for name, value in env.items():
                patch.setenv(name, value)
            wait_for(lambda: redis_reachable(url), timeout_s=20, what="the Redis")
            echo.respond("/echo", _echo)
            full_env = {**os.environ, **env}
            beat = ServiceProcess(
                "beat",
                [str(BIN / "celery"), "-A", "agentfleet.celery_app", "beat", "-l", "INFO"],
                full_env,
                logs,
            )
            procs.append(beat)
            flower_port = free_port()
            flower_env = {**full_env, "AGENTFLEET_FLOWER__BASIC_AUTH": ":".join(FLOWER_AUTH)}
            flower_argv = [
                str(BIN / "celery"),
                "-A",
                "agentfleet.celery_app",
                "flower",
                f"--port={flower_port}",
            ]
            flower = ServiceProcess("flower", flower_argv, flower_env, logs)
            procs.append(flower)
            flower_url = f"http://127.0.0.1:{flower_port}"
            with LocalCluster(
                workers=1, concurrency=4, pool="threads", broker_url=url, settings=load_settings()
            ) as cluster:
                wait_for(
                    lambda: http_status(f"{flower_url}/healthcheck") == 200,
                    timeout_s=60,
                    what="flower",
                    processes=procs,
                )
                run = cluster.fleet().map(TASK, [{"url": echo.url("/echo"), "note": f"token={SECRET}"}])
                outcome = next(run.as_completed(timeout_s=60))
                yield Deployment(url, cluster, beat, flower, flower_url, echo, outcome)
    finally:
        for proc in procs:
            proc.stop(timeout_s=5)
        server.terminate()
        server.wait(timeout=10)


def _flower(deployment: Deployment, path: str) -> httpx.Response:
    return httpx.get(deployment.flower_url + path, auth=FLOWER_AUTH, timeout=30)


def test_an_echoed_credential_comes_back_redacted(deployment: Deployment) -> None:
    assert deployment.outcome.ok, deployment.outcome.error
    assert deployment.outcome.result == {"echo": "you sent [REDACTED]", "note": "token=[REDACTED]"}
    (hit,) = deployment.echo.hits("/echo")
    assert hit.headers["x-key"] == SECRET, "the server did get the credential"


def test_nothing_in_redis_holds_a_secret(deployment: Deployment) -> None:
    # Run store, run events, outcomes, dead letters, the audit stream (a fleet item that
    # succeeds writes no Celery result: its outcome is in the run store).
    client = redis.Redis.from_url(deployment.url, decode_responses=True)
    try:
        # Celery's "succeeded" line comes after everything the task wrote, its events included.
        worker = deployment.cluster.workers[0]
        wait_for(lambda: "succeeded in" in worker.log_text(), timeout_s=15, what="Celery's succeeded line")
        found = [text for text in all_contents(client) if leaks(text)]
    finally:
        client.close()
    assert found == []


def test_the_worker_log_holds_no_secret(deployment: Deployment) -> None:
    worker = deployment.cluster.workers[0]
    # Celery writes its "succeeded" line just after the task body recorded the outcome.
    wait_for(lambda: "succeeded in" in worker.log_text(), timeout_s=15, what="Celery's succeeded line")
    log = worker.log_text()
    for line in ("the server answered", "raw response body", "printed by the task", "the SDK was configured"):
        assert line in log, f"the worker logged {line!r}"
    assert "succeeded in" in log, "Celery logged the task's return value"
    assert "[REDACTED]" in log
    assert leaks(log) == []


@pytest.mark.parametrize("process", ["beat", "flower"])
def test_beat_and_flower_logs_hold_no_secret(deployment: Deployment, process: str) -> None:
    proc = getattr(deployment, process)
    wait_for(lambda: "a failure quoting the key" in proc.log(), timeout_s=30, what=f"{process} to log")
    log = proc.log()
    assert f"{process}: the SDK was configured with key=[REDACTED]" in log
    assert "Traceback" in log
    assert leaks(log) == []


def test_flower_shows_only_redacted_user_inputs_and_results(deployment: Deployment) -> None:
    def task_seen() -> dict[str, Any] | None:
        tasks = _flower(deployment, "/api/tasks").json()
        done = [t for t in tasks.values() if t.get("name") == TASK and t.get("state") == "SUCCESS"]
        return done[0] if done else None

    task = wait_for(task_seen, timeout_s=30, what="Flower to see the task")
    assert "_af" not in task["kwargs"] and "_af" not in task["args"]
    assert "token=[REDACTED]" in task["kwargs"] and "/echo" in task["kwargs"]
    page = _flower(deployment, f"/task/{task['uuid']}").text
    assert leaks(json.dumps(task)) == [] and leaks(page) == []
    assert "_af" not in page


def test_inspect_conf_and_flower_worker_pages_mask_the_redis_password(deployment: Deployment) -> None:
    (node,) = [w.name for w in deployment.cluster.workers]
    conf = deployment.cluster.fleet().app.control.inspect(destination=[node], timeout=10).conf()
    assert conf and node in conf
    assert conf[node]["redbeat_redis_options"]["password"] == "********"
    assert leaks(json.dumps(conf)) == []
    page = wait_for(lambda: _worker_page(deployment, node), timeout_s=30, what="Flower's worker page")
    assert "redbeat_redis_url" in page
    assert leaks(page) == []


def _worker_page(deployment: Deployment, node: str) -> str | None:
    response = _flower(deployment, f"/worker/{node}")
    return response.text if response.status_code == 200 and "redbeat" in response.text else None


def test_beat_runs_with_a_password_holding_slash_plus_and_equals(deployment: Deployment) -> None:
    wait_for(lambda: "beat: Acquired lock" in deployment.beat.log(), timeout_s=30, what="beat's lock")
    assert deployment.beat.alive()


def test_flower_started_by_celery_is_behind_basic_auth_on_loopback(deployment: Deployment) -> None:
    base = deployment.flower_url
    assert httpx.get(f"{base}/api/workers", timeout=10).status_code == 401
    assert httpx.get(f"{base}/", auth=(FLOWER_AUTH[0], "wrong"), timeout=10).status_code == 401
    assert _flower(deployment, "/api/workers").status_code == 200
    port = int(base.rsplit(":", 1)[1])
    assert _listening_addresses(port) == {"127.0.0.1"}


def _listening_addresses(port: int) -> set[str]:
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as handle:
            for line in handle.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:
                    found.add(
                        ".".join(str(int(address[i : i + 2], 16)) for i in (6, 4, 2, 0))
                        if len(address) == 8
                        else address
                    )
    return found
