"""Shared fixtures: a real Redis for the whole session, and a fresh key prefix per test."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import redis

from agentfleet.config import reset_settings
from agentfleet.embedded_redis import EmbeddedRedis, redis_reachable


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
