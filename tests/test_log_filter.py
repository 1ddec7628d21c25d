"""The secret filter on log handlers, the redacting task logger, and the service's handlers."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from agentfleet.config import reset_settings
from agentfleet.log_filter import RedactingAdapter, SecretFilter, install
from agentfleet.redaction import Redactor

SECRET = "sk-log-canary-8c41d2"


@pytest.fixture
def redactor() -> Redactor:
    return Redactor.build(values=[SECRET])


@pytest.fixture
def captured(redactor: Redactor) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing to a stream through a handler that has the filter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(SecretFilter(lambda: redactor))
    logger = logging.getLogger("test.log_filter.captured")
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_message_arguments_are_redacted(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.warning("GET https://other.example/x?k=%s returned %d", SECRET, 302)
    logger.warning("config %s", {"api_key": "not-a-known-value", "n": 1})
    assert stream.getvalue().splitlines() == [
        "WARNING GET https://other.example/x?k=[REDACTED] returned 302",
        "WARNING config {'api_key': '[REDACTED]', 'n': 1}",
    ]


def test_tracebacks_and_stacks_are_redacted(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    try:
        raise RuntimeError(f"refused token {SECRET}")
    except RuntimeError:
        logger.exception("failed")
    logger.warning("here", stack_info=True)
    text = stream.getvalue()
    assert "RuntimeError: refused token [REDACTED]" in text and "Stack (most recent call last)" in text
    assert SECRET not in text


def test_a_url_password_is_masked_even_when_not_configured(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    logger.error("cannot connect to redis://:hunter2-pw@10.0.0.5:6379/0")
    assert stream.getvalue() == "ERROR cannot connect to redis://:[REDACTED]@10.0.0.5:6379/0\n"


def test_a_malformed_call_still_logs_redacted(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    logger.warning("two %s %s", SECRET)
    assert "two" in stream.getvalue() and SECRET not in stream.getvalue()


def test_a_record_is_redacted_once_whatever_reaches_it(redactor: Redactor) -> None:
    calls: list[int] = []

    def source() -> Redactor:
        calls.append(1)
        return redactor

    secret_filter = SecretFilter(source, refresh_s=3600)
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "v=%s", (SECRET,), None)
    assert secret_filter.filter(record) and secret_filter.filter(record)
    assert record.getMessage() == "v=[REDACTED]"
    assert len(calls) == 1, "the redactor is built once per refresh, not per record"


def test_install_covers_every_handler_of_every_logger_once(redactor: Redactor) -> None:
    named = logging.getLogger("test.log_filter.library")
    handler = logging.NullHandler()
    named.addHandler(handler)
    secret_filter = SecretFilter(lambda: redactor)
    try:
        install(secret_filter)
        assert install(secret_filter) == 0, "a second install adds nothing"
        everywhere = [*logging.getLogger().handlers, handler, logging.lastResort]
        for each in everywhere:
            assert each is not None
            assert sum(isinstance(f, SecretFilter) for f in each.filters) == 1, each
    finally:
        named.removeHandler(handler)
        for each in [*logging.getLogger().handlers, logging.lastResort]:
            if each is not None and secret_filter in each.filters:
                each.removeFilter(secret_filter)


def test_the_task_logger_redacts_before_any_handler(
    redactor: Redactor, caplog: pytest.LogCaptureFixture
) -> None:
    log = RedactingAdapter(logging.getLogger("test.log_filter.task"), {"task_id": "t1"}, redactor)
    with caplog.at_level(logging.INFO, logger="test.log_filter.task"):
        log.info("echo %s", SECRET)
        try:
            raise ValueError(SECRET)
        except ValueError:
            log.exception("boom")
    messages = [record.getMessage() for record in caplog.records]
    assert messages[0] == "echo [REDACTED]"
    assert messages[1].startswith("boom\nTraceback") and "ValueError: [REDACTED]" in messages[1]
    assert all(SECRET not in m for m in messages)
    assert all(record.task_id == "t1" for record in caplog.records)


def test_the_service_filters_uvicorns_handlers(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from agentfleet.cli.serve_cmd import service_server

    monkeypatch.setenv("MY_VENDOR_KEY", SECRET)
    monkeypatch.setenv("AGENTFLEET_CREDENTIALS", '{"v": {"env": "MY_VENDOR_KEY", "domains": ["x.example"]}}')
    reset_settings()
    service_server(object(), host="127.0.0.1", port=1, log_level="info")
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            assert any(isinstance(f, SecretFilter) for f in handler.filters), name
    logging.getLogger("uvicorn.error").error("request from a client with key %s", SECRET)
    err = capfd.readouterr().err
    assert "request from a client with key [REDACTED]" in err and SECRET not in err
