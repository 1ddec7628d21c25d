"""``agentfleet limits show`` and ``limits plan``: tables, JSON documents, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import redis
from celery import Celery
from ratelimit_support import make_limiter
from typer.testing import CliRunner, Result

from agentfleet.cli.app import app
from agentfleet.config import LimitSpec, load_settings
from agentfleet.registry import WorkerRegistry
from agentfleet.tasks.heartbeat import Heartbeat

VENDOR = LimitSpec(rate_per_s=2, burst=4, max_concurrency=3)


@pytest.fixture
def env(redis_url: str, key_prefix: str) -> dict[str, str]:
    return {
        "AGENTFLEET_BROKER_URL": redis_url,
        "AGENTFLEET_KEY_PREFIX": key_prefix,
        "AGENTFLEET_LIMITS": json.dumps({"vendor-a.example": VENDOR.model_dump(exclude_none=True)}),
        "AGENTFLEET_LIMITER__MAX_PARALLELISM": "20",
        "COLUMNS": "160",
    }


def _run(env: dict[str, str], *args: str) -> Result:
    result = CliRunner().invoke(app, ["limits", *args], env=env)
    assert result.exit_code == 0, result.output
    return result


def test_show_reports_limits_tokens_slots_and_pauses(
    env: dict[str, str], redis_client: redis.Redis, key_prefix: str
) -> None:
    limiter = make_limiter(redis_client, key_prefix, {"vendor-a.example": VENDOR}, max_parallelism=20)
    held = [limiter.acquire("vendor-a.example", max_wait_s=0) for _ in range(2)]
    limiter.acquire("free.example", max_wait_s=0).release()
    limiter.pause("free.example", 30)
    try:
        document = json.loads(_run(env, "show", "--json").output)
        table = _run(env, "show").output
    finally:
        for permit in held:
            permit.release()
    by_name = {d["downstream"]: d for d in document["downstreams"]}
    assert set(by_name) == {"vendor-a.example", "free.example", "_fleet"}
    vendor = by_name["vendor-a.example"]
    assert vendor["configured"] and vendor["limits"] == {"rate_per_s": 2, "burst": 4, "max_concurrency": 3}
    assert (vendor["slots_in_use"], vendor["max_slots"]) == (2, 3)
    # Two of four tokens taken, refilled at 2 a second since: well under a full bucket.
    assert 2.0 <= vendor["buckets"][0]["tokens"] < 4.0
    assert vendor["paused_until"] is None
    free = by_name["free.example"]
    assert not free["configured"] and free["buckets"] == [] and 25 < free["paused_for_s"] <= 30
    assert (by_name["_fleet"]["slots_in_use"], by_name["_fleet"]["max_slots"]) == (2, 20)
    for text in ("vendor-a.example", "2/s, burst 4, 3 at once", "2 / 3", "free.example", "s more", "2 / 20"):
        assert text in table, table


def test_show_takes_downstreams_by_name(env: dict[str, str]) -> None:
    document = json.loads(_run(env, "show", "never-called.example", "--json").output)
    assert [d["downstream"] for d in document["downstreams"]] == ["never-called.example"]
    assert document["downstreams"][0]["slots_in_use"] == 0


def test_plan_is_littles_law_with_headroom(env: dict[str, str]) -> None:
    document = json.loads(_run(env, "plan", "--rps", "50", "--latency-s", "0.8", "--json").output)
    assert (document["in_flight"], document["concurrency"], document["cap_only_concurrency"]) == (40, 48, 33)
    assert "Little's law" in document["explanation"]
    table = _run(env, "plan", "--rps", "10", "--latency-s", "2", "--headroom", "0.5").output
    assert "30" in table and "Little's law" in table


def test_a_nonsense_plan_is_one_line_and_a_non_zero_exit() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", "limits", "plan", "--rps", "0", "--latency-s", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip() == "error: rps must be a number above 0 (got 0.0)"


def _worker_beats(redis_url: str, key_prefix: str, node: str, **settings: object) -> None:
    """``node``'s heartbeat as a worker configured with ``settings`` writes it."""
    worker = load_settings(broker_url=redis_url, key_prefix=key_prefix, **settings)
    heartbeat = Heartbeat(worker, Celery(node), node, ["agents"])
    WorkerRegistry.from_settings(worker).beat(heartbeat.record())


def test_show_reports_the_limits_the_workers_use_not_this_processes(
    env: dict[str, str], redis_url: str, key_prefix: str
) -> None:
    # This process says vendor-a allows 2/s; the workers were started with 7/s and a cap of 5.
    _worker_beats(
        redis_url,
        key_prefix,
        "w1@host-a",
        limits={"vendor-a.example": {"rate_per_s": 7, "max_concurrency": 5}},
        limiter={"max_parallelism": 40},
    )
    document = json.loads(_run(env, "show", "--json").output)
    assert (document["view"], document["workers"], document["other_views"]) == ("workers", ["w1@host-a"], [])
    by_name = {d["downstream"]: d for d in document["downstreams"]}
    assert by_name["vendor-a.example"]["limits"] == {"rate_per_s": 7, "max_concurrency": 5}
    assert by_name["_fleet"]["max_slots"] == 40
    table = _run(env, "show").output
    assert "as 1 live worker use them (from heartbeats: w1@host-a)" in table
    assert "7/s, 5 at once" in table and "2/s" not in table


def test_workers_configured_differently_are_shown_one_view_each(
    env: dict[str, str], redis_url: str, key_prefix: str
) -> None:
    for node in ("w1@a", "w2@b"):
        _worker_beats(redis_url, key_prefix, node, limits={"vendor-a.example": {"rate_per_s": 7}})
    _worker_beats(redis_url, key_prefix, "w3@c", limits={"vendor-a.example": {"rate_per_s": 1}})
    document = json.loads(_run(env, "show", "vendor-a.example", "--json").output)
    assert document["workers"] == ["w1@a", "w2@b"]
    assert document["downstreams"][0]["limits"] == {"rate_per_s": 7}
    [other] = document["other_views"]
    assert other["workers"] == ["w3@c"] and other["downstreams"][0]["limits"] == {"rate_per_s": 1}
    result = CliRunner().invoke(app, ["limits", "show", "vendor-a.example"], env=env)
    assert "2 different limits configurations" in result.stderr
    assert "2 live workers" in result.stdout and "1 live worker " in result.stdout


def test_with_no_live_worker_show_says_it_reads_this_processes_configuration(env: dict[str, str]) -> None:
    document = json.loads(_run(env, "show", "--json").output)
    assert (document["view"], document["workers"]) == ("this process", [])
    assert "this process's configuration (no live worker reports its own)" in _run(env, "show").output
