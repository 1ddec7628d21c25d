"""JSON log lines (``log_json``): one object per record, redacted before it is formatted."""

from __future__ import annotations

import io
import json
import logging

import pytest

from agentfleet.config import reset_settings
from agentfleet.log_format import JsonFormatter
from agentfleet.tasks.process_logging import install_secret_filter


def _line(logger: logging.Logger, stream: io.StringIO, *args: object, **kwargs: object) -> dict:
    logger.info(*args, **kwargs)  # type: ignore[arg-type]
    return json.loads(stream.getvalue().strip().splitlines()[-1])


@pytest.fixture
def captured() -> tuple[logging.Logger, io.StringIO, logging.Handler]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger("agentfleet.test.jsonlog")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream, handler
    logger.removeHandler(handler)


def test_a_record_is_one_json_object_with_its_context(captured: tuple) -> None:
    logger, stream, handler = captured
    handler.setFormatter(JsonFormatter())
    entry = _line(logger, stream, "item %s done", "7", extra={"task_id": "r-7", "run_id": "r"})
    assert entry["message"] == "item 7 done"
    assert (entry["level"], entry["logger"], entry["task_id"], entry["run_id"]) == (
        "INFO",
        "agentfleet.test.jsonlog",
        "r-7",
        "r",
    )
    assert entry["time"].endswith("+00:00")


def test_a_json_message_stays_an_object_and_an_exception_is_kept(captured: tuple) -> None:
    logger, stream, handler = captured
    handler.setFormatter(JsonFormatter())
    assert _line(logger, stream, json.dumps({"run_id": "r", "succeeded": 3}))["message"] == {
        "run_id": "r",
        "succeeded": 3,
    }
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    entry = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert "ValueError: boom" in entry["exc"]


def test_log_json_puts_the_formatter_on_every_handler_after_the_secret_filter(
    captured: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream, handler = captured
    everyone = [
        h
        for name in ["", *logging.root.manager.loggerDict]
        for h in getattr(logging.getLogger(name), "handlers", [])
    ]
    before = {h: h.formatter for h in everyone}
    monkeypatch.setenv("AGENTFLEET_LOG_JSON", "true")
    reset_settings()
    try:
        install_secret_filter()
        entry = _line(logger, stream, "calling with password=tok-very-secret-123")
        assert isinstance(handler.formatter, JsonFormatter)
        assert "tok-very-secret-123" not in json.dumps(entry)
        assert "[REDACTED]" in entry["message"]
    finally:
        for other, formatter in before.items():
            other.setFormatter(formatter)
