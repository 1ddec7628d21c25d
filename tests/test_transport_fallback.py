"""A library release that no longer has a private name agentfleet relies on slows agentfleet
down instead of breaking it: the feature is off, one warning names the library, its version and
what was not found, and a fan-out still runs on the stock parts."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from worker_env import TESTS_DIR

from agentfleet.transport import internals
from agentfleet.transport.internals import Need

# Every process started with this folder on PYTHONPATH imports it first: it makes kombu's
# ``Channel._q_for_pri`` take differently named parameters (a release that renamed them, still
# working), and adds to every other feature a name its library does not have.
SITECUSTOMIZE = """
import functools
from kombu.transport import redis as kombu_redis
from agentfleet.transport import internals

_original = kombu_redis.Channel._q_for_pri

def _q_for_pri(self, name, level):
    return _original(self, name, level)

kombu_redis.Channel._q_for_pri = _q_for_pri
internals.NEEDS = internals.NEEDS + tuple(
    internals.Need(feature, "celery", "celery.app.base:Celery", "_gone_in_this_release")
    for feature in internals.FEATURES
    if feature != "redis_transport"
)
"""

CLIENT = """
import json, sys
import fleet_test_tasks as tt
from worker_env import cluster_env
from agentfleet import LocalCluster
from agentfleet.transport import report

env = cluster_env(PYTHONPATH=sys.argv[1])
with LocalCluster(workers=1, concurrency=4, pool="threads", broker_url=sys.argv[2], env=env) as cluster:
    fleet = cluster.fleet()
    summary = fleet.map(tt.echo, [{"n": n} for n in range(20)]).wait(timeout_s=120)
    conf = fleet.app.conf
    log = cluster.workers[0].log_path.read_text()
    print(json.dumps({
        "succeeded": summary.succeeded,
        "features": report(),
        "transport": conf.broker_transport,
        "autoscaler": conf.worker_autoscaler,
        "app": type(fleet.app).__module__,
        "worker_warnings": [line for line in log.splitlines() if "stock behaviour" in line],
    }))
"""


def test_a_parameter_renamed_by_a_release_switches_its_feature_off_with_one_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    need = Need("redis_transport", "kombu", "kombu.transport.redis:Channel", "_q_for_pri", ("queue", "level"))
    monkeypatch.setattr(internals, "NEEDS", (need,))
    monkeypatch.setattr(internals, "_warned", set())
    internals.problems.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="agentfleet.transport"):
            assert internals.enabled("redis_transport") is False
            assert internals.enabled("redis_transport") is False
            assert internals.enabled("quick_pools") is True
    finally:
        internals.problems.cache_clear()
    (record,) = caplog.records
    version = internals._version("kombu")
    assert "the Redis transport" in record.getMessage()
    assert f"kombu {version}: kombu.transport.redis.Channel._q_for_pri takes (queue, pri), not" in (
        record.getMessage()
    )


def test_a_name_no_longer_set_by_its_method_is_reported() -> None:
    need = Need("quick_pools", "redis", "redis.connection:AbstractConnection", "_gone", set_by="__init__")
    assert internals._check(need) == "no longer set by __init__"
    assert internals._check(Need("quick_pools", "redis", "redis.nowhere:X", "y")) == "not found"


def test_every_listed_name_holds_on_the_installed_libraries() -> None:
    assert internals.problems() == {feature: [] for feature in internals.FEATURES}


@pytest.mark.slow
def test_a_fan_out_runs_on_the_stock_parts_when_every_feature_is_off(tmp_path: Path, redis_url: str) -> None:
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent(SITECUSTOMIZE))
    path = os.pathsep.join([str(tmp_path), TESTS_DIR])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CLIENT), path, redis_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["succeeded"] == 20
    assert found["features"] == {feature: False for feature in internals.FEATURES}
    assert found["transport"] is None  # kombu picks its own by the scheme
    assert found["autoscaler"] == "celery.worker.autoscale:Autoscaler"
    assert found["app"].startswith("celery.")
    assert (
        "kombu.transport.redis.Channel._q_for_pri takes (name, level), not (queue, pri, ...)" in done.stderr
    )
    # The worker says it once per feature it uses, not once per message.
    warned = found["worker_warnings"]
    assert len(warned) == len(set(warned)) and warned
