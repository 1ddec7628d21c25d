"""``state_url``: agentfleet's own state on another Redis (or a Redis Cluster) than the broker."""

from __future__ import annotations

import pytest

from agentfleet.config import load_settings
from agentfleet.errors import ConfigError
from agentfleet.redis_client import RedisTarget, cluster_nodes, mask_url

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
