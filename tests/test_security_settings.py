"""Settings that guard a surface are passwords: empty, blank or short ones are refused at start."""

from __future__ import annotations

import pytest

from agentfleet.config import load_settings
from agentfleet.errors import ConfigError

GOOD = "f" * 32


@pytest.mark.parametrize("token", ["", "   ", "k3y", "x" * 31])
def test_a_service_token_that_is_no_password_is_refused(token: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(service={"token": token})
    message = str(raised.value)
    assert "AGENTFLEET_SERVICE__TOKEN" in message and "openssl rand -hex 32" in message
    assert not token.strip() or token not in message, "the value is never echoed"


def test_an_empty_token_in_the_environment_is_refused_not_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_SERVICE__TOKEN", "")
    with pytest.raises(ConfigError, match="AGENTFLEET_SERVICE__TOKEN"):
        load_settings()


def test_a_token_of_32_characters_is_accepted() -> None:
    token = load_settings(service={"token": GOOD}).service.token
    assert token is not None and token.get_secret_value() == GOOD


@pytest.mark.parametrize("auth", ["ops:short", "ops:" + " " * 40, "ops:" + "p" * 31])
def test_a_short_flower_password_is_refused(auth: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(flower={"basic_auth": auth})
    assert "AGENTFLEET_FLOWER__BASIC_AUTH" in str(raised.value) and "openssl rand -hex 32" in str(
        raised.value
    )


def test_a_flower_password_of_32_characters_is_accepted() -> None:
    assert load_settings(flower={"basic_auth": "ops:" + GOOD}).flower.basic_auth is not None
