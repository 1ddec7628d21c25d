"""Settings: sources, parsing, and messages that name the setting and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfleet.config import get_settings, load_settings
from agentfleet.errors import ConfigError


def test_defaults_are_valid() -> None:
    settings = load_settings()
    assert settings.retry.max_retries == 3
    assert settings.task_time_limit_s < settings.visibility_timeout_s


def test_time_limit_above_visibility_timeout_names_both_settings_and_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTFLEET_VISIBILITY_TIMEOUT_S", "600")
    monkeypatch.setenv("AGENTFLEET_TASK_TIME_LIMIT_S", "900")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "task_time_limit_s (900) must be below visibility_timeout_s (600)" in message
    assert "run twice" in message
    assert "AGENTFLEET_VISIBILITY_TIMEOUT_S" in message


def test_a_bad_nested_value_names_its_env_variable_and_toml_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_RETRY__MAX_RETRIES", "many")
    with pytest.raises(ConfigError, match=r"AGENTFLEET_RETRY__MAX_RETRIES / retry.max_retries: .*'many'"):
        load_settings()


def test_an_unknown_setting_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "agentfleet.toml"
    config.write_text("[retry]\nmax_retires = 5\n")
    monkeypatch.setenv("AGENTFLEET_CONFIG", str(config))
    with pytest.raises(ConfigError, match=r"retry.max_retires: unknown setting"):
        load_settings()


def test_a_non_redis_broker_url_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", "amqp://guest@localhost//")
    with pytest.raises(ConfigError, match="AGENTFLEET_BROKER_URL / broker_url: must be a Redis URL"):
        load_settings()


def test_toml_limits_and_env_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "agentfleet.toml"
    config.write_text(
        '[limits."vendor-a.example"]\nrate_per_s = 10\nburst = 5\nmax_concurrency = 3\n\n'
        '[limits."anthropic:claude-haiku-4-5"]\nrequests_per_min = 1000\n\n'
        "[retry]\nmax_retries = 7\n"
    )
    monkeypatch.setenv("AGENTFLEET_CONFIG", str(config))
    monkeypatch.setenv("AGENTFLEET_RETRY__MAX_RETRIES", "2")
    settings = load_settings()
    assert settings.limit_for("vendor-a.example").max_concurrency == 3
    assert settings.limit_for("anthropic:claude-haiku-4-5").requests_per_min == 1000
    assert settings.limit_for("unknown.example") == settings.limiter.default
    assert settings.retry.max_retries == 2, "the environment wins over the file"


def test_missing_config_file_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_CONFIG", "/nonexistent/agentfleet.toml")
    with pytest.raises(ConfigError, match=r"AGENTFLEET_CONFIG names /nonexistent/agentfleet\.toml"):
        load_settings()


def test_task_modules_accept_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_TASK_MODULES", "myapp.tasks, myapp.more ,")
    assert load_settings().task_modules == ["myapp.tasks", "myapp.more"]


def test_get_settings_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    first = get_settings()
    monkeypatch.setenv("AGENTFLEET_KEY_PREFIX", "other")
    assert get_settings() is first


def test_importing_the_package_reads_no_environment_and_builds_no_app() -> None:
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "os.environ['AGENTFLEET_RETRY__MAX_RETRIES'] = 'broken'\n"
        "import agentfleet\n"
        "assert 'agentfleet.celery_app' not in sys.modules\n"
        "assert 'celery' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_the_client_api_imports_while_a_setting_only_workers_read_is_invalid() -> None:
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "os.environ['AGENTFLEET_DLQ__DIGEST_CRON'] = 'every morning'\n"
        "os.environ['AGENTFLEET_WORKER__CONCURRENCY'] = 'many'\n"
        "from agentfleet import DeadLetterQueue, Fleet, Run, TaskContext, fleet_task\n"
        "assert 'agentfleet.celery_app' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
