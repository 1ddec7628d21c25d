"""Broker mistakes told as they are: refused and missing passwords, a configured Redis that does
not answer (never replaced by the embedded one). Each is one line, without the password.
(URLs that cannot be right are tests/test_redis_passwords.py's.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfleet import Fleet, LocalCluster
from agentfleet.config import load_settings
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.errors import BrokerUnavailable, ConfigError

PASSWORD = "s3cret-Pa55"
DOWN = "redis://:hunter2@127.0.0.1:1/0"


@pytest.fixture(scope="module")
def protected() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(password=PASSWORD) as server:
        yield server


def _cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfleet", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
    )


def _one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    return out.stderr


def test_a_wrong_password_is_called_a_refused_password(protected: EmbeddedRedis) -> None:
    wrong = protected.url.replace(PASSWORD, "not-it")
    err = _one_line_error(_cli("runs", "list", AGENTFLEET_BROKER_URL=wrong))
    assert "refused the password (invalid username-password pair or user is disabled)" in err
    assert "AGENTFLEET_BROKER_URL" in err
    assert "not-it" not in err and ":[REDACTED]@127.0.0.1" in err


def test_a_missing_password_is_called_missing(protected: EmbeddedRedis) -> None:
    bare = protected.url.replace(f":{PASSWORD}@", "")
    err = _one_line_error(_cli("dlq", "list", AGENTFLEET_BROKER_URL=bare))
    assert "requires a password and the URL gives none" in err


def test_a_configured_broker_that_does_not_answer_is_an_error_not_an_embedded_redis(tmp_path: Path) -> None:
    (tmp_path / "agentfleet.toml").write_text(f'broker_url = "{DOWN}"\n')
    (tmp_path / "items.jsonl").write_text('{"n": 1}\n')
    out = _cli("run", "agentfleet.simulated_agent", "--inputs", "items.jsonl", cwd=tmp_path)
    err = _one_line_error(out)
    assert "no Redis answers at redis://:[REDACTED]@127.0.0.1:1/0" in err
    assert "embedded" not in out.stdout + out.stderr
    assert "hunter2" not in err


def test_local_cluster_refuses_a_configured_broker_that_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", DOWN)
    cluster = LocalCluster(workers=1)
    with pytest.raises(BrokerUnavailable, match=r"no Redis answers at redis://:\*\*\*@127\.0\.0\.1:1/0"):
        cluster.start()
    assert not cluster.embedded and cluster.pids() == []


def test_a_refused_password_fails_dispatch_at_once_instead_of_riding_out_an_outage(
    protected: EmbeddedRedis,
) -> None:
    settings = load_settings(broker_url=protected.url.replace(PASSWORD, "not-it"))
    started = time.monotonic()
    with Fleet(settings) as fleet, pytest.raises(ConfigError, match="refused the password"):
        fleet.map("agentfleet.simulated_agent", [{"item": 1}])
    assert time.monotonic() - started < settings.delivery.client_outage_s / 4
