"""``state_url``: agentfleet's own state on another Redis (or a Redis Cluster) than the broker.

The settings, and the reconciler with the state on a second plain Redis: what it reads and
drops of kombu's messages it reaches through the broker's client, never the state's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis
from stranded import KINDS, forget, lose, two_passes, waiting_ids
from worker_env import own_queues

from agentfleet.config import load_settings
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.errors import ConfigError
from agentfleet.orchestration import Fleet
from agentfleet.redis_client import RedisTarget, cluster_nodes, mask_url
from agentfleet.transport.layout import UNACKED, UNACKED_INDEX

CLUSTER = "redis+cluster://:s3cret@10.0.0.1:7000;redis+cluster://10.0.0.2:7001"


def test_without_a_state_url_the_state_lives_on_the_broker() -> None:
    settings = load_settings(broker_url="redis://b:6379/0")
    assert settings.redis_target().url == settings.broker_target().url == "redis://b:6379/0"


def test_a_state_url_moves_the_state_and_leaves_the_broker() -> None:
    settings = load_settings(broker_url="redis://b:6379/0", state_url=CLUSTER)
    assert settings.redis_target().url == CLUSTER and settings.redis_target().is_cluster
    assert settings.broker_target().url == "redis://b:6379/0"


def test_a_state_url_that_is_not_redis_names_the_setting_and_the_forms() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(state_url="http://cache:6379")
    message = str(caught.value)
    assert "AGENTFLEET_STATE_URL / state_url" in message
    assert "redis+cluster://" in message


def test_the_cluster_password_is_a_secret_and_is_masked() -> None:
    settings = load_settings(state_url=CLUSTER)
    assert "s3cret" in settings.secret_values()
    assert "s3cret" not in mask_url(CLUSTER)


def test_every_node_of_a_cluster_url_is_a_seed() -> None:
    assert cluster_nodes(CLUSTER) == [("10.0.0.1", 7000), ("10.0.0.2", 7001)]
    assert RedisTarget("rediss+cluster://h:7000").is_cluster


def test_a_cluster_list_with_a_stray_url_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Redis Cluster node"):
        cluster_nodes("redis+cluster://h:7000;redis://other:6379")


@pytest.fixture(scope="module")
def second_redis() -> Iterator[EmbeddedRedis]:
    """A plain Redis apart from the broker, for the state."""
    with EmbeddedRedis() as server:
        yield server


@pytest.mark.parametrize("kind", KINDS)
def test_with_the_state_on_another_redis_the_reconciler_drops_stale_copies_from_the_broker(
    kind: str, redis_url: str, second_redis: EmbeddedRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTFLEET_STATE_URL", second_redis.url)
    tag = uuid.uuid4().hex[:8]
    settings = load_settings(
        broker_url=redis_url,
        key_prefix=f"su{tag}",
        queues=own_queues(f"su{tag}"),
        delivery={"reconcile_grace_s": 5.0},
        dispatch={"require_workers": False},
    )
    assert settings.redis_target().url == second_redis.url
    broker = redis.Redis.from_url(redis_url, decode_responses=True)
    state = redis.Redis.from_url(second_redis.url, decode_responses=True)
    with Fleet(settings) as fleet:
        stranded = lose(kind, fleet, broker)
        try:
            assert stranded.recovered(two_passes(fleet))
            assert waiting_ids(broker, stranded.queue) == [stranded.task_id], "sent again"
            assert not broker.hexists(UNACKED, stranded.tag), "the stale copy is gone from the broker"
            assert broker.zscore(UNACKED_INDEX, stranded.tag) is None
        finally:
            forget(broker, stranded.tag)
        run_key = fleet.store.run_key(stranded.run_id)
    assert state.exists(run_key) and not broker.exists(run_key), "the run lives on the state's Redis"
