"""Redis high availability: a run whose master is killed mid-run finishes on the promoted replica.

A master, a replica and three Sentinels run for real on loopback; the broker, the run store, the
limiter, the dead-letter queue and beat all reach Redis through the Sentinels.
"""

from __future__ import annotations

from pathlib import Path

import fleet_test_tasks as tt
import pytest
from fault_support import Effects, fault_cluster, outcome_events, tokens, wait_until
from sentinel_support import MASTER_NAME, sentinel_group

from agentfleet.celery_config import celery_config
from agentfleet.config import load_settings

# A password with characters that must be percent-encoded in a URL (the group's URL is).
PASSWORD = "s3cret/pa+ss=word"


@pytest.mark.slow
def test_a_run_finishes_through_a_sentinel_failover(tmp_path: Path) -> None:
    effects = Effects(tmp_path / "effects")
    with (
        sentinel_group(PASSWORD) as group,
        fault_cluster(group.url, effects, workers=2, concurrency=4, sentinel_master=MASTER_NAME) as cluster,
    ):
        run = cluster.fleet().map(tt.effect, tokens("ha", 30, sleep_s=1.0))
        wait_until(lambda: len(effects.executions()) >= 8, 30, "the run to get going")
        old = group.master_port()
        group.master.kill()
        assert group.wait_failover(old) != old
        summary = run.wait(timeout_s=180)
        counts = outcome_events(run)
    assert (summary.succeeded, summary.timed_out) == (30, 0)
    assert sorted(counts) == list(range(30)) and set(counts.values()) == {1}
    assert set(effects.applied().values()) == {1}
    assert sum(effects.executions().values()) <= 30 + 2 * 4


def test_sentinel_settings_reach_celery_beat_and_the_result_backend() -> None:
    url = "sentinel://:pw@127.0.0.1:26379/2;sentinel://127.0.0.1:26380"
    config = celery_config(
        load_settings(broker_url=url, sentinel_master=MASTER_NAME, sentinel_password="spw")
    )
    assert config["broker_transport_options"]["master_name"] == MASTER_NAME
    assert config["broker_transport_options"]["sentinel_kwargs"] == {"password": "spw"}
    assert config["result_backend_transport_options"]["master_name"] == MASTER_NAME
    options = config["redbeat_redis_options"]
    assert options["sentinels"] == [("127.0.0.1", 26379), ("127.0.0.1", 26380)]
    assert (options["service_name"], options["db"], options["password"]) == (MASTER_NAME, 2, "pw")
