"""Secrets named in settings never reach stored inputs, messages or tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfleet.config import load_settings
from agentfleet.redaction import REDACTED, Redactor, key_words, redact

KEYS = ["api_key", "apikey", "password", "secret", "token", "authorization"]


def test_keys_match_by_words_not_substrings() -> None:
    r = Redactor.build(KEYS)
    assert all(
        r.secret_key(k)
        for k in ["api_key", "openai_api_key", "X-Api-Key", "apiKey", "access_token", "DB_PASSWORD"]
    )
    assert not any(r.secret_key(k) for k in ["max_tokens", "input_tokens", "keyboard", "secretary_name"])
    assert key_words("openaiApi-Key") == ("openai", "api", "key")


def test_a_key_names_a_secret_by_each_redactors_own_key_list() -> None:
    default, custom = Redactor.build(KEYS), Redactor.build(["ssn"])
    for _ in range(2):  # asked again, each keeps its own answer
        assert default.secret_key("api_key") and not default.secret_key("user_ssn")
        assert custom.secret_key("user_ssn") and not custom.secret_key("api_key")


def test_nested_values_under_secret_keys_are_replaced_and_their_paths_listed() -> None:
    paths: list[str] = []
    data = {
        "url": "https://x.example",
        "auth": {"headers": [{"Authorization": "Bearer abc"}]},
        "password": "",
    }
    out = Redactor.build(KEYS).value(data, paths=paths)
    assert out == {
        "url": "https://x.example",
        "auth": {"headers": [{"Authorization": REDACTED}]},
        "password": "",
    }
    assert paths == ["auth.headers[0].Authorization"]


def test_known_secret_values_are_replaced_inside_any_text() -> None:
    r = Redactor.build(values=["tok-12345", None, "ab"])
    assert r.text('Traceback ...\nValueError: sent tok-12345 to "ab" twice') == (
        f'Traceback ...\nValueError: sent {REDACTED} to "ab" twice'
    )
    assert redact({"note": ["see tok-12345"]}, values=["tok-12345"]) == {"note": [f"see {REDACTED}"]}


def test_learning_an_input_makes_its_secret_values_known() -> None:
    r = Redactor.build(KEYS).learn({"api_key": "sk-live-777", "n": 3})
    assert r.text("rejected key sk-live-777") == f"rejected key {REDACTED}"


def test_settings_know_their_credentials_and_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    secret_file = tmp_path / "vendor.key"
    secret_file.write_text("file-secret-42\n")
    monkeypatch.setenv("VENDOR_TOKEN", "env-secret-99")
    settings = load_settings(
        broker_url="redis://:broker-pass@127.0.0.1:6379/0",
        credentials={
            "a": {"env": "VENDOR_TOKEN", "domains": ["a.example"]},
            "b": {"file": str(secret_file), "domains": ["b.example"]},
        },
        llm={"api_key": "sk-ant-xyz"},
    )
    assert {"env-secret-99", "file-secret-42", "sk-ant-xyz", "broker-pass"} <= set(settings.secret_values())
    text = settings.redactor().text("env-secret-99 file-secret-42 sk-ant-xyz")
    assert text == " ".join([REDACTED] * 3)
