"""Redaction of nested structures, tracebacks and key=value text."""

from __future__ import annotations

import copy
import json
import traceback
from typing import Any

import pytest
from pydantic import BaseModel

from agentfleet.redaction import REDACTED, Redactor, redact, shown_repr
from agentfleet.redis_client import mask_url

SECRET = "sk-canary-3f9a1c77d2"


def _traceback_with_secret() -> str:
    try:
        headers = {"Authorization": f"Bearer {SECRET}"}
        raise RuntimeError(f"request failed: headers={headers!r} url=https://x.example/?k={SECRET}")
    except RuntimeError as exc:
        return "".join(traceback.format_exception(exc))


def test_values_are_removed_from_nested_structures() -> None:
    stored: dict[str, Any] = {
        "input": {"text": f"use {SECRET} please", "items": [1, 2.5, None, True, SECRET]},
        "pair": ("keep", f"x{SECRET}x"),
        "tags": {SECRET},
        "counts": {"max_tokens": 16, "input_tokens": 7},
        SECRET: "a secret as a key",
    }
    original = copy.deepcopy(stored)
    clean = redact(stored, values=[SECRET])
    assert SECRET not in json.dumps(clean, default=str)
    assert clean["input"]["text"] == f"use {REDACTED} please"
    assert clean["input"]["items"] == [1, 2.5, None, True, REDACTED]
    assert clean["pair"] == ("keep", f"x{REDACTED}x")
    assert clean["tags"] == [REDACTED]
    assert clean["counts"] == {"max_tokens": 16, "input_tokens": 7}
    assert clean[REDACTED] == "a secret as a key"
    assert stored == original


def test_secret_named_keys_lose_their_values_whatever_the_type() -> None:
    clean = redact(
        {
            "password": "hunter2",
            "api_key": 12345,
            "X-Api-Key": "abc",
            "headers": {"Authorization": "Basic Zm9vOmJhcg==", "Accept": "text/html"},
            "access_token": {"nested": "object"},
            "client_secret": ["a", "b"],
            "token_count": 3,
            "keys": "not a secret",
        },
        keys=["api_key", "password", "secret", "token", "authorization"],
    )
    assert clean["password"] == REDACTED
    assert clean["api_key"] == REDACTED
    assert clean["X-Api-Key"] == REDACTED
    assert clean["headers"] == {"Authorization": REDACTED, "Accept": "text/html"}
    assert clean["access_token"] == REDACTED
    assert clean["client_secret"] == REDACTED
    assert clean["keys"] == "not a secret"


def test_tracebacks_are_redacted_by_value_and_by_key() -> None:
    text = _traceback_with_secret()
    assert SECRET in text
    clean = redact(text, values=[SECRET])
    assert SECRET not in clean
    assert "RuntimeError: request failed" in clean
    # Without the value, the header is still caught by its name; the bare query value is not.
    by_key_only = redact(text)
    assert f"Bearer {SECRET}" not in by_key_only
    assert f"'Authorization': '{REDACTED}'" in by_key_only


def test_key_value_forms_inside_strings() -> None:
    text = (
        "password=hunter2 user=bob\n"
        "Authorization: Bearer abc.def\n"
        '{"api_key": "k-123", "model": "m"}\n'
        "{'secret': 'shh', 'n': 1}\n"
        "https://h.example/p?x=1&access_token=zzz&y=2\n"
        "max_tokens=16 input_tokens: 5"
    )
    clean = Redactor.build().text(text)
    for leaked in ("hunter2", "abc.def", "k-123", "shh", "zzz"):
        assert leaked not in clean
    for kept in (
        "user=bob",
        '"model": "m"',
        "'n': 1",
        "x=1",
        "y=2",
        "max_tokens=16",
        "input_tokens: 5",
    ):
        assert kept in clean


def test_percent_encoded_values_are_removed() -> None:
    secret = "a b/c+d"
    clean = redact("GET /?k=a%20b%2Fc%2Bd and a+b%2Fc%2Bd", values=[secret])
    assert "a%20b" not in clean and "a+b%2F" not in clean


class Stored(BaseModel):
    name: str
    token: str


def test_models_and_other_objects_become_redacted_data() -> None:
    stored = [Stored(name=SECRET, token="t"), b"bytes " + SECRET.encode(), ValueError(SECRET)]
    clean = redact(stored, values=[SECRET])
    assert clean[0] == {"name": REDACTED, "token": REDACTED}
    assert clean[1] == f"bytes {REDACTED}"
    assert clean[2] == REDACTED


def test_key_matching_rules() -> None:
    secret_key = Redactor.build().secret_key
    assert secret_key("X-Api-Key")
    assert secret_key("password_hash")
    assert secret_key("db_password_old")
    assert secret_key("COOKIE")
    assert not secret_key("max_tokens")
    assert not secret_key("monkey")


def test_url_passwords_are_masked_known_or_not() -> None:
    r = Redactor.build()
    text = "no Redis at redis://:pw%2Fx@10.0.0.5:6379/0 nor amqp://guest:guest@mq/ (see https://a.example:443/u/@bob)"
    assert r.text(text) == (
        "no Redis at redis://:[REDACTED]@10.0.0.5:6379/0 nor amqp://guest:[REDACTED]@mq/ "
        "(see https://a.example:443/u/@bob)"
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:p%2Fw@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://:p/w+x=@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://user:pw@h/1", "rediss://user:***@h/1"),
        ("sentinel://:pw@s1:26379;sentinel://s2:26379", "sentinel://:***@s1:26379;sentinel://s2:26379"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_a_percent_encoded_secret_is_also_found_decoded() -> None:
    r = Redactor.build(values=["a%2Fb%2Bc"])
    assert r.text("raw a/b+c and as given a%2Fb%2Bc") == "raw [REDACTED] and as given [REDACTED]"


def test_a_shown_repr_is_redacted_before_it_is_cut() -> None:
    secret = "sk-" + "9" * 40
    r = Redactor.build(values=[secret])
    shown = shown_repr({"text": "x" * 190 + secret + "y" * 500, "api_key": "k", "items": list(range(100))}, r)
    assert len(shown) <= 1024
    assert "999999" not in shown, "no part of the secret survives the cut"
    assert "'api_key': '[REDACTED]'" in shown


# Findings and messages as people write them: a secret-named word, a colon, then a sentence.
PROSE = (
    "hard-coded secret assigned to 'ADMIN_PASSWORD': read it from the environment or a secret store",
    "The token: keep it out of the repository.",
    "Password: never commit one, rotate it instead",
    "Authorization: see the docs for how to sign in",
    "api_key: use the credential named in the settings",
)


@pytest.mark.parametrize("text", PROSE)
def test_ordinary_prose_passes_through_unchanged(text: str) -> None:
    assert Redactor.build().text(text) == text
    assert Redactor.build().value({"findings": [{"message": text}]}) == {"findings": [{"message": text}]}


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("password: hunter2 was found in the log", "hunter2"),
        ("password: letmein\nnext line", "letmein"),
        ("password: letmein", "letmein"),
        ("token: abc.def goes on", "abc.def"),
        ("secret: S3cr3tValue and more", "S3cr3tValue"),
        ("api_key: sk-live-1234 is wrong", "sk-live-1234"),
        ("Authorization: Bearer abcdef and more", "abcdef"),
        ("Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("password=hunter and more", "hunter"),
        ("token: QwErTy is mixed case", "QwErTy"),
        ("the secret: 'shh' it says", "shh"),
    ],
)
def test_secrets_beside_prose_are_still_redacted(text: str, secret: str) -> None:
    clean = Redactor.build().text(text)
    assert secret not in clean and REDACTED in clean
