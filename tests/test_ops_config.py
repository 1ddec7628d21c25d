"""Settings and Celery configuration for operations: schedules, fan-outs, beat, Flower, autoscale."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery.schedules import crontab

from agentfleet.celery_config import RUN_SCHEDULE_TASK, beat_schedule, celery_config
from agentfleet.cli.flower_cmd import flower_launch, is_loopback
from agentfleet.cli.worker_cmd import resolve_queues
from agentfleet.config import load_settings
from agentfleet.errors import ConfigError
from agentfleet.transport.autoscale import FleetAutoscaler


def test_schedules_become_beat_entries_on_the_maintenance_queue() -> None:
    settings = load_settings(
        schedules={
            "nightly": {"task": "myapp.extract", "cron": "0 6 * * 1", "inputs": "in.jsonl"},
            "often": {"task": "myapp.ping", "interval_s": 2},
        }
    )
    entries = beat_schedule(settings)
    nightly, often = entries["schedule:nightly"], entries["schedule:often"]
    assert nightly["task"] == often["task"] == RUN_SCHEDULE_TASK
    assert nightly["kwargs"] == {"name": "nightly"}
    assert isinstance(nightly["schedule"], crontab)
    assert nightly["schedule"].hour == {6} and nightly["schedule"].day_of_week == {1}
    assert often["schedule"] == timedelta(seconds=2)
    assert nightly["options"]["queue"] == often["options"]["queue"] == "agentfleet.maintenance"
    assert nightly["options"]["expires"] == 3600, "beat.dispatch_expires_s"
    assert often["options"]["expires"] == 60, "an interval's dispatch lives at least a minute"


def test_the_celery_config_uses_redbeat_with_a_lock_under_our_prefix() -> None:
    settings = load_settings(key_prefix="fleet1", beat={"max_loop_interval_s": 2, "lock_timeout_s": 9})
    conf = celery_config(settings)
    assert conf["beat_scheduler"] == "redbeat.RedBeatScheduler"
    assert conf["redbeat_key_prefix"] == "fleet1:redbeat:"
    assert conf["redbeat_lock_timeout"] == 9
    assert conf["beat_max_loop_interval"] == 2
    assert conf["redbeat_redis_url"] == settings.broker_url
    assert conf["worker_autoscaler"] == "agentfleet.transport.autoscale:FleetAutoscaler"
    assert conf["broker_transport_options"]["max_connections"] == settings.broker_max_connections


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"schedules": {"x": {"task": "t"}}}, "set exactly one of cron"),
        ({"schedules": {"x": {"task": "t", "cron": "0 6 * *"}}}, "AGENTFLEET_SCHEDULES__X__CRON"),
        ({"schedules": {"x": {"task": "t", "cron": "0 25 * * *"}}}, "not a cron expression"),
        ({"schedules": {"x": {"task": "t", "interval_s": 0}}}, "schedules.x.interval_s"),
        (
            {"schedules": {"x": {"task": "t", "interval_s": 5}}, "fanouts": {"x": {"task": "t"}}},
            "both under [fanouts] and [schedules]",
        ),
        ({"beat": {"max_loop_interval_s": 10, "lock_timeout_s": 15}}, "AGENTFLEET_BEAT__LOCK_TIMEOUT_S"),
        ({"flower": {"basic_auth": "onlyuser"}}, "AGENTFLEET_FLOWER__BASIC_AUTH"),
        ({"flower": {"basic_auth": "a:b,c:d"}}, "without commas"),
        ({"worker": {"autoscale_keepalive_s": 0}}, "worker.autoscale_keepalive_s"),
        (
            {"worker": {"autoscale": "200,10"}, "broker_max_connections": 100},
            "AGENTFLEET_BROKER_MAX_CONNECTIONS",
        ),
    ],
)
def test_bad_operations_settings_name_the_setting(overrides: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(**overrides)
    assert fragment in str(caught.value)


def test_a_secret_is_never_echoed_in_an_error() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(flower={"basic_auth": "hunter2-is-my-password"})
    assert "hunter2" not in str(caught.value)


def test_named_fanouts_come_from_fanouts_or_schedules(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "agentfleet.toml"
    config.write_text(
        '[fanouts.triage]\ntask = "myapp.triage"\ninputs = [{ text = "a" }]\n\n'
        '[schedules.nightly]\ntask = "myapp.extract"\ncron = "0 6 * * *"\ninputs = "inputs/urls.jsonl"\n'
    )
    monkeypatch.setenv("AGENTFLEET_CONFIG", str(config))
    settings = load_settings()
    assert settings.fanout("triage").task == "myapp.triage"
    assert settings.fanout("nightly").inputs == "inputs/urls.jsonl"
    with pytest.raises(ConfigError, match=r"no fan-out named 'nope' \(known: nightly, triage\)"):
        settings.fanout("nope")


def test_worker_queue_roles_resolve_to_the_configured_queues(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_QUEUES__AGENTS", "prod.agents")
    assert resolve_queues("agents") == "prod.agents"
    assert resolve_queues("fanin,maintenance") == "agentfleet.fanin,agentfleet.maintenance"
    assert resolve_queues("custom.queue") == "custom.queue"
    assert resolve_queues(None) == "prod.agents,agentfleet.fanin,agentfleet.maintenance"


def test_the_worker_command_refuses_a_pool_larger_than_the_connection_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from agentfleet.cli.app import app

    monkeypatch.setenv("AGENTFLEET_BROKER_MAX_CONNECTIONS", "50")
    result = CliRunner().invoke(app, ["worker", "--autoscale", "100,10"])
    assert result.exit_code != 0
    assert "AGENTFLEET_BROKER_MAX_CONNECTIONS" in result.output


def test_flower_binds_loopback_and_keeps_the_password_off_the_command_line() -> None:
    password = "s3cret-pass-" + "7" * 32
    settings = load_settings(flower={"basic_auth": f"ops:{password}"})
    argv, env = flower_launch(settings, address=None, port=None, insecure=False, environ={})
    assert "--address=127.0.0.1" in argv and "--port=5555" in argv
    assert not any(password in arg for arg in argv)
    assert "FLOWER_BASIC_AUTH" not in env, "Flower reads the auth from agentfleet's settings"


def test_flower_refuses_to_start_without_authentication() -> None:
    with pytest.raises(ConfigError, match="AGENTFLEET_FLOWER__BASIC_AUTH"):
        flower_launch(load_settings(), address=None, port=None, insecure=False, environ={})
    argv, env = flower_launch(
        load_settings(), address="0.0.0.0", port=6000, insecure=True, environ={"FLOWER_BASIC_AUTH": "x:y"}
    )
    assert "--address=0.0.0.0" in argv and "FLOWER_BASIC_AUTH" not in env
    assert env["AGENTFLEET_FLOWER__INSECURE"] == "true"
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0")


def test_the_flower_command_without_auth_is_one_line_and_a_non_zero_exit() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", "flower"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2
    assert "AGENTFLEET_FLOWER__BASIC_AUTH" in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    "command", [["serve"], ["flower"], ["beat"], ["healthcheck"], ["healthcheck", "worker"]]
)
def test_operations_commands_have_help(command: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", *command, "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout


class _Pool:
    def __init__(self, size: int) -> None:
        self.num_processes = size

    def grow(self, n: int) -> None:
        self.num_processes += n

    def shrink(self, n: int) -> None:
        self.num_processes -= n

    def maintain_pool(self) -> None:
        return None


def _scaler(pool: _Pool, reserved: list[object], monkeypatch: pytest.MonkeyPatch) -> FleetAutoscaler:
    monkeypatch.setattr("celery.worker.state.reserved_requests", reserved)
    return FleetAutoscaler(pool, max_concurrency=40, min_concurrency=4, keepalive=0.05)


def test_the_autoscaler_doubles_while_work_waits_for_a_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = _Pool(4)
    reserved: list[object] = [object()] * 5  # every slot busy and one request waiting
    scaler = _scaler(pool, reserved, monkeypatch)
    sizes = []
    for _ in range(4):
        scaler.maybe_scale()
        sizes.append(pool.num_processes)
        reserved[:] = [object()] * (pool.num_processes + 1)
    assert sizes == [8, 16, 32, 40], "doubles each step and stops at the maximum"


def test_the_autoscaler_shrinks_to_its_minimum_after_keepalive(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    pool = _Pool(4)
    reserved: list[object] = [object()] * 30
    scaler = _scaler(pool, reserved, monkeypatch)
    scaler.maybe_scale()
    assert pool.num_processes == 30, "a reserved backlog larger than double is met at once"
    reserved.clear()
    scaler.maybe_scale()
    assert pool.num_processes == 30, "no shrinking before the keepalive has passed"
    time.sleep(0.1)
    scaler.maybe_scale()
    assert pool.num_processes == 4
