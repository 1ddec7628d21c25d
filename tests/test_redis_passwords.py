"""Redis passwords: accepted in every spelling that is valid, and never shown.

A password holding '/', '+' or '=' works percent-encoded in the URL or given apart
(``AGENTFLEET_REDIS_PASSWORD``); an unencoded '/' is one line naming the fix. No message,
CLI error or Celery configuration dump (what ``celery inspect conf`` and Flower's worker
pages show) holds the password, in any spelling.
"""

from __future__ import annotations

import json
import subprocess
import sys
from urllib.parse import quote

import pytest
from celery.app.utils import filter_hidden_settings

from agentfleet.celery_config import celery_config
from agentfleet.config import load_settings
from agentfleet.errors import ConfigError

PASSWORD = "s3cr/et+pw=="
ENCODED = quote(PASSWORD, safe="")


def _shows_password(text: str) -> bool:
    return PASSWORD in text or ENCODED in text or "s3cr" in text


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfleet", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", **env},
    )


def test_an_unencoded_slash_is_one_error_naming_the_fix_without_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(broker_url=f"redis://:{PASSWORD}@127.0.0.1:6379/0")
    message = str(caught.value)
    assert "AGENTFLEET_BROKER_URL / broker_url" in message
    assert "%2F" in message and "AGENTFLEET_REDIS_PASSWORD" in message
    assert not _shows_password(message)


def test_the_cli_reports_an_unencoded_slash_in_one_line() -> None:
    out = _cli("runs", "list", env={"AGENTFLEET_BROKER_URL": f"redis://:{PASSWORD}@127.0.0.1:6379/0"})
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert "percent-encode" in out.stderr
    assert not _shows_password(out.stderr + out.stdout)


def test_an_unreachable_broker_is_reported_with_its_password_masked() -> None:
    url = f"redis://:{ENCODED}@127.0.0.1:9/0"
    out = _cli("runs", "list", env={"AGENTFLEET_BROKER_URL": url})
    assert out.returncode == 2
    assert "redis://:[REDACTED]@127.0.0.1:9/0" in out.stderr
    assert not _shows_password(out.stderr + out.stdout)


def test_a_percent_encoded_password_is_decoded_for_the_clients() -> None:
    settings = load_settings(broker_url=f"redis://:{ENCODED}@redis:6379/0")
    assert settings.secret_values() == [PASSWORD]
    assert settings.redactor().text(f"auth {PASSWORD} / {ENCODED}") == "auth [REDACTED] / [REDACTED]"


def test_a_password_given_apart_goes_into_the_urls_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_REDIS_PASSWORD", PASSWORD)
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", "redis://redis:6379/0")
    monkeypatch.setenv("AGENTFLEET_RESULT_BACKEND", "redis://redis:6379/1")
    settings = load_settings()
    assert settings.broker_url == f"redis://:{ENCODED}@redis:6379/0"
    assert settings.result_backend == f"redis://:{ENCODED}@redis:6379/1"


def test_two_different_passwords_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_REDIS_PASSWORD", PASSWORD)
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", "redis://:other-password@redis:6379/0")
    with pytest.raises(ConfigError, match="in one place") as caught:
        load_settings()
    assert not _shows_password(str(caught.value)) and "other-password" not in str(caught.value)


def test_an_empty_password_from_compose_means_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_REDIS_PASSWORD", "")
    assert load_settings(broker_url="redis://redis:6379/0").broker_url == "redis://redis:6379/0"


def test_the_celery_configuration_shown_by_inspect_conf_masks_the_password() -> None:
    config = celery_config(load_settings(broker_url=f"redis://:{ENCODED}@redis:6379/0"))
    assert config["redbeat_redis_url"] == "redis://redis:6379/0"
    assert config["redbeat_redis_options"]["password"] == PASSWORD
    shown = filter_hidden_settings(config)  # what a worker answers to `inspect conf`
    assert not _shows_password(json.dumps(shown, default=str))
