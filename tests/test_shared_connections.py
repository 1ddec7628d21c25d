"""Tasks of one worker process share kept-alive connections: the server counts the handshakes.

Every request still goes through the guard (SSRF check, pinning, credentials) and the fleet
transport; only the sockets under them are shared.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tls_support import TLSCountingServer, make_cert
from worker_env import cluster_env

from agentfleet import LocalCluster

pytestmark = pytest.mark.slow

SLOTS = 4
TASKS = 40


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_cert(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def server(cert: tuple[Path, Path]) -> Iterator[TLSCountingServer]:
    with TLSCountingServer(*cert) as running:
        yield running


@pytest.fixture(scope="module")
def cluster(cert: tuple[Path, Path]) -> Iterator[LocalCluster]:
    env = cluster_env(
        AGENTFLEET_TASK_MODULES="ops_test_tasks",
        AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS='["localhost"]',
        SSL_CERT_FILE=str(cert[0]),
    )
    with LocalCluster(workers=1, concurrency=SLOTS, pool="threads", env=env) as running:
        yield running


def test_tasks_reuse_the_connections_earlier_tasks_opened(
    cluster: LocalCluster, server: TLSCountingServer
) -> None:
    inputs = [{"n": n, "url": server.url(), "client": "httpx"} for n in range(TASKS)]
    run = cluster.fleet().map("ops_test_tasks.http_call", inputs)
    summary = run.wait(timeout_s=120)
    assert summary.succeeded == TASKS, summary
    assert server.requests == TASKS
    # At most one connection per slot that called at once; one per task before pools were shared.
    assert server.handshakes <= SLOTS, server.handshakes


def test_the_guard_still_refuses_what_it_must_on_a_shared_pool(
    cluster: LocalCluster, server: TLSCountingServer
) -> None:
    before = server.requests
    run = cluster.fleet().map(
        "ops_test_tasks.http_call", [{"n": 0, "url": "https://169.254.169.254/", "client": "httpx"}]
    )
    outcome = run.wait(timeout_s=60) and run.outcomes()[0]
    assert not outcome.ok and outcome.error_type == "ForbiddenDestination"
    assert server.requests == before
