"""docker-compose.yml's services, each one's command run for real.

No Docker engine runs here, so each service's command line runs as a process on this machine,
with the environment the compose file gives it (values from .env.example, plus the secrets a
user fills in: the Redis password holds '/', '+' and '='). Only placement changes: the Redis
host name ``redis`` becomes 127.0.0.1 and a free port, the mounted config directory becomes
./deploy, and services that bind 0.0.0.0 in a container bind loopback on free ports here.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import redis
import yaml
from compose_support import AGENTFLEET_SERVICES, COMPOSE, FILLED_IN, read_dotenv, resolved
from ops_support import BIN, REPO, ServiceProcess, http_status, wait_for

from agentfleet import LocalCluster
from agentfleet.embedded_redis import free_port, redis_server_binary

BEAT_LOCK = "af:redbeat::lock"


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    env = {**read_dotenv(REPO / ".env.example"), **FILLED_IN}
    found: dict[str, dict[str, Any]] = resolved(document["services"], env)
    return found


# The commands, for real ---------------------------------------------------------------------


@dataclass
class Deployment:
    redis: ServiceProcess
    redis_env: dict[str, str]
    redis_url: str
    password: str
    processes: dict[str, ServiceProcess]
    envs: dict[str, dict[str, str]]
    cluster: LocalCluster
    hostname: str


def _service_env(
    service: dict[str, Any], redis_port: int, ports: dict[str, int], hostname: str
) -> dict[str, str]:
    env = {key: str(value) for key, value in service.get("environment", {}).items()}
    url = env["AGENTFLEET_BROKER_URL"]
    env["AGENTFLEET_BROKER_URL"] = url.replace("//redis:6379", f"//127.0.0.1:{redis_port}")
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if env.get("AGENTFLEET_CONFIG", "").startswith(target):
            env["AGENTFLEET_CONFIG"] = str(REPO / source) + env["AGENTFLEET_CONFIG"][len(target) :]
    for prefix, port in (("AGENTFLEET_FLOWER__", ports["flower"]), ("AGENTFLEET_SERVICE__", ports["api"])):
        if f"{prefix}HOST" in env:
            env[f"{prefix}HOST"] = "127.0.0.1"
            env[f"{prefix}PORT"] = str(port)
    env["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    env["HOSTNAME"] = hostname
    env["HOME"] = os.environ.get("HOME", "/tmp")
    return env


def _ping(cluster: LocalCluster, node: str) -> bool:
    replies = cluster.fleet().app.control.ping(destination=[node], timeout=1.0) or []
    return any(node in reply for reply in replies)


@pytest.fixture(scope="module")
def deployment(
    services: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    logs = tmp_path_factory.mktemp("compose")
    hostname = socket.gethostname()
    # Redis: the compose command itself, with redis-server (and redis-cli, for its healthcheck)
    # found on PATH as shims that add this machine's placement: port, bind address, directory.
    redis_port, data = free_port(), logs / "redis-data"
    data.mkdir()
    shim_dir = logs / "bin"
    shim_dir.mkdir()
    real = Path(redis_server_binary()).parent
    placement = {
        "redis-server": f'"$@" --port {redis_port} --bind 127.0.0.1 --dir {data}',
        "redis-cli": f'-p {redis_port} "$@"',
    }
    for tool, args in placement.items():
        shim = shim_dir / tool
        shim.write_text(f"#!/bin/sh\nexec {real / tool} {args}\n")
        shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    redis_service = services["redis"]
    redis_env = {key: str(value) for key, value in redis_service["environment"].items()}
    redis_env["PATH"] = f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"
    redis_proc = ServiceProcess("redis", redis_service["command"], redis_env, logs)
    password = redis_env["REDIS_PASSWORD"]
    url = f"redis://:{quote(password, safe='')}@127.0.0.1:{redis_port}/0"
    processes: dict[str, ServiceProcess] = {}
    try:
        wait_for(lambda: _redis_ready(url), timeout_s=30, what="the compose Redis", processes=[redis_proc])
        ports = {"flower": free_port(), "api": free_port()}
        envs = {
            name: _service_env(services[name], redis_port, ports, hostname) for name in AGENTFLEET_SERVICES
        }
        with LocalCluster(workers=0, broker_url=url) as cluster:
            for name in AGENTFLEET_SERVICES:
                processes[name] = ServiceProcess(name, services[name]["command"], envs[name], logs)
            running = Deployment(redis_proc, redis_env, url, password, processes, envs, cluster, hostname)
            _wait_until_up(running)
            yield running
    finally:
        for proc in processes.values():
            proc.terminate()
        for proc in processes.values():
            proc.stop(timeout_s=3)
        redis_proc.stop()


def _redis_ready(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _wait_until_up(deployment: Deployment) -> None:
    """Until each worker answers a ping, beat holds its lock, Flower and the API answer."""
    procs = list(deployment.processes.values())
    env = deployment.envs
    host = deployment.hostname
    wait_for(
        lambda: _ping(deployment.cluster, f"agents@{host}"), timeout_s=90, what="worker ping", processes=procs
    )
    wait_for(
        lambda: _ping(deployment.cluster, f"fanin@{host}"),
        timeout_s=90,
        what="fan-in worker",
        processes=procs,
    )
    client = redis.Redis.from_url(deployment.redis_url)
    try:
        wait_for(
            lambda: client.pttl(BEAT_LOCK) > 0, timeout_s=90, what="beat to hold its lock", processes=procs
        )
    finally:
        client.close()
    flower = f"http://127.0.0.1:{env['flower']['AGENTFLEET_FLOWER__PORT']}"
    api = f"http://127.0.0.1:{env['api']['AGENTFLEET_SERVICE__PORT']}"
    wait_for(
        lambda: http_status(f"{flower}/healthcheck") == 200, timeout_s=90, what="flower", processes=procs
    )
    wait_for(lambda: http_status(f"{api}/health") == 200, timeout_s=90, what="the api", processes=procs)


@pytest.mark.slow
def test_each_service_comes_up(deployment: Deployment) -> None:
    host = deployment.hostname
    assert _ping(deployment.cluster, f"agents@{host}") and _ping(deployment.cluster, f"fanin@{host}")
    for name, proc in deployment.processes.items():
        assert proc.alive(), f"{name} exited:\n{proc.log()[-3000:]}"
    assert "beat: Acquired lock" in deployment.processes["beat"].log()
    api = f"http://127.0.0.1:{deployment.envs['api']['AGENTFLEET_SERVICE__PORT']}"
    health = httpx.get(f"{api}/health", timeout=10).json()
    assert health["workers_active"] == 2
    assert set(health["queues"]) == {"agentfleet.agents", "agentfleet.fanin", "agentfleet.maintenance"}


@pytest.mark.slow
def test_each_healthcheck_passes(deployment: Deployment, services: dict[str, dict[str, Any]]) -> None:
    checks = {}
    for name in AGENTFLEET_SERVICES:
        kind, *argv = services[name]["healthcheck"]["test"]
        assert kind == "CMD"
        checks[name] = subprocess.Popen(
            argv, env=deployment.envs[name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    kind, shell = services["redis"]["healthcheck"]["test"]
    assert kind == "CMD-SHELL"
    redis_result = subprocess.run(
        ["sh", "-c", shell], env=deployment.redis_env, capture_output=True, timeout=30, check=False
    )
    assert redis_result.returncode == 0, redis_result
    wrong = dict(deployment.redis_env, REDISCLI_AUTH="not-the-password")
    refused = subprocess.run(["sh", "-c", shell], env=wrong, capture_output=True, timeout=30, check=False)
    assert refused.returncode != 0, "the Redis healthcheck fails without the password"
    for name, proc in checks.items():
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, f"{name} healthcheck failed: {output}"


@pytest.mark.slow
def test_redis_runs_with_the_compose_settings(deployment: Deployment) -> None:
    port = int(deployment.redis_url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as anonymous:
        anonymous.sendall(b"PING\r\n")
        assert anonymous.recv(256).startswith(b"-NOAUTH"), "a client without the password is refused"
    client = redis.Redis.from_url(deployment.redis_url, decode_responses=True)
    try:
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    finally:
        client.close()


@pytest.mark.slow
def test_flower_refuses_anonymous_requests_and_lists_workers_with_credentials(deployment: Deployment) -> None:
    env = deployment.envs["flower"]
    base = f"http://127.0.0.1:{env['AGENTFLEET_FLOWER__PORT']}"
    assert httpx.get(f"{base}/api/workers", timeout=10).status_code == 401
    assert httpx.get(f"{base}/", timeout=10).status_code == 401
    assert httpx.get(f"{base}/api/workers", auth=("admin", "wrong"), timeout=10).status_code == 401
    user, _, password = env["AGENTFLEET_FLOWER__BASIC_AUTH"].partition(":")
    host = deployment.hostname

    def listed() -> set[str] | None:
        response = httpx.get(f"{base}/api/workers?refresh=1", auth=(user, password), timeout=30)
        assert response.status_code == 200
        names = set(response.json())
        return names if {f"agents@{host}", f"fanin@{host}"} <= names else None

    wait_for(listed, timeout_s=60, interval_s=1.0, what="Flower to list both workers")
    command_line = " ".join(_cmdline(deployment.processes["flower"].pid))
    assert "flower" in command_line and password not in command_line, "the password stays off `ps`"


def _cmdline(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return [part.decode() for part in handle.read().split(b"\0") if part]


@pytest.mark.slow
def test_the_api_starts_a_fanout_that_the_agent_worker_runs(deployment: Deployment) -> None:
    env = deployment.envs["api"]
    api = f"http://127.0.0.1:{env['AGENTFLEET_SERVICE__PORT']}"
    auth = {"Authorization": f"Bearer {env['AGENTFLEET_SERVICE__TOKEN']}"}
    inputs = [{"item": f"doc-{i}", "latency_s": 0.1} for i in range(4)]
    response = httpx.post(
        f"{api}/runs", json={"fanout": "simulated", "inputs": inputs}, headers=auth, timeout=30
    )
    assert response.status_code == 202, response.text
    summary_url = api + response.json()["summary_url"]

    def finished() -> dict[str, Any] | None:
        summary: dict[str, Any] = httpx.get(summary_url, headers=auth, timeout=10).json()
        return summary if summary["status"] == "finished" else None

    summary = wait_for(finished, timeout_s=60, what="the triggered run")
    assert summary["succeeded"] == 4
