"""The echo corpus: every shape in which a server may hand a credential back to a task.

Whatever the task then does with it, returning it as its result or logging it, the value
comes out redacted: the result through the delivery's redactor (as ``tasks/execution.py``
stores it), the log line through the process's secret filter.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest

from agentfleet.config import load_settings
from agentfleet.log_filter import SecretFilter
from agentfleet.redaction import Redactor, base64_cores

SECRET = "sk/echo+canary=4b1d9e77c2a0 x"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


ECHOES: dict[str, Callable[[str], str]] = {
    "plain": lambda v: f"you sent {v}",
    "percent-encoded": lambda v: f"GET /cb?k={quote(v, safe='')}",
    "lowercase-hex": lambda v: f"GET /cb?k={quote(v, safe='').lower()}",
    "form-encoded": lambda v: f"k={quote_plus(v, safe='')}&n=1",
    "json-string": lambda v: json.dumps({"headers": {"x-key": v}}),
    "basic-auth-echo": lambda v: f"Authorization: Basic {_b64('user:' + v)}",
    "base64-blob": lambda v: json.dumps({"debug": _b64("request dump ... " + v + " ...")}),
    "urlsafe-base64": lambda v: base64.urlsafe_b64encode(("++" + v).encode()).decode(),
    "in-a-url": lambda v: f"redirected to https://other.example/x?token={quote(v, safe='')}",
    "in-a-traceback": lambda v: f'Traceback ...\n  File "x.py"\nValueError: bad key {v!r}',
}


@pytest.fixture
def redactor(monkeypatch: pytest.MonkeyPatch) -> Redactor:
    monkeypatch.setenv("VENDOR_A_KEY", SECRET)
    settings = load_settings(
        credentials={"vendor_a": {"env": "VENDOR_A_KEY", "domains": ["api.vendor.example"]}}
    )
    return settings.redactor()


def _leaks(text: str) -> list[str]:
    forms = {SECRET, quote(SECRET, safe=""), quote(SECRET, safe="").lower(), quote_plus(SECRET, safe="")}
    forms.add("4b1d9e77c2a0")  # the value's random part
    forms.update(core.decode() for core in base64_cores(SECRET.encode()))
    return [form for form in forms if form in text]


def test_the_corpus_is_large_enough() -> None:
    assert len(ECHOES) >= 10


@pytest.mark.parametrize("shape", sorted(ECHOES))
def test_an_echo_returned_as_the_result_is_stored_redacted(shape: str, redactor: Redactor) -> None:
    echoed = ECHOES[shape](SECRET)
    stored = json.dumps(redactor.value({"echo": echoed, "items": [echoed]}))
    assert _leaks(stored) == []
    assert "[REDACTED]" in stored


@pytest.mark.parametrize("shape", sorted(ECHOES))
def test_an_echo_logged_by_any_library_is_written_redacted(shape: str, redactor: Redactor) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SecretFilter(lambda: redactor))
    logger = logging.getLogger(f"test.echo.{shape}")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("response: %s", ECHOES[shape](SECRET))
    finally:
        logger.removeHandler(handler)
    assert "[REDACTED]" in stream.getvalue()
    assert _leaks(stream.getvalue()) == []
