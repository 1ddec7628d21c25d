"""Shared fixtures: a real Redis for the whole session, and a fresh key prefix per test."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import file_order
import pytest
import redis
from worker_env import cluster_env

from agentfleet.config import load_settings, reset_settings
from agentfleet.embedded_redis import EmbeddedRedis, redis_reachable
from agentfleet.local import LocalCluster


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background of a non-interactive shell (``make test &``, ``nohup``)
    # inherits SIGINT ignored, and so would every process it starts: none would turn Ctrl-C into
    # KeyboardInterrupt, which the Ctrl-C tests send. Take Python's default back (processes
    # started from here then begin with it too: a handler, unlike "ignored", ends at exec).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    file_order.order_longest_first(config, items)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without it (test-floors) never called
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole files to each process, as ``--dist loadfile``, but the tests of the files in
    ``file_order.SPREAD`` one by one."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return file_order.work_unit(nodeid)

    return ByFile(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    file_order.record_report(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    file_order.save_lengths(session.config)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """AGENTFLEET_BROKER_URL when it answers, else an embedded redis-server for the session."""
    url = os.environ.get("AGENTFLEET_BROKER_URL")
    if url and redis_reachable(url):
        yield url
        return
    with EmbeddedRedis() as server:
        yield server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def key_prefix() -> str:
    """A prefix no other test uses, so tests sharing one Redis never see each other's keys."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture(autouse=True)
def _fresh_settings() -> Iterator[None]:
    reset_settings()
    yield
    reset_settings()


@pytest.fixture(scope="session")
def cluster(redis_url: str) -> Iterator[LocalCluster]:
    """Two real worker processes (threads pool) on the session's Redis."""
    # Queues of its own: other suites' clusters on this Redis never lose tasks to it, nor do the
    # session clusters of other pytest-xdist workers when AGENTFLEET_BROKER_URL is shared.
    name = f"session{os.environ.get('PYTEST_XDIST_WORKER', '')}"
    queues = {"agents": f"{name}.agents", "fanin": f"{name}.fanin", "maintenance": f"{name}.maintenance"}
    with LocalCluster(
        workers=2,
        concurrency=8,
        pool="threads",
        broker_url=redis_url,
        env=cluster_env(),
        settings=load_settings(queues=queues),
    ) as running:
        yield running
