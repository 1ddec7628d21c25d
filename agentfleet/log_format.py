"""JSON log lines, one object per record, for processes whose logs a machine reads.

With ``log_json`` set, worker, beat, Flower and ``agentfleet serve`` processes format every
record as one JSON object: ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``,
``message``, ``process``, the ``task_id``/``run_id``/``item_key`` a task's ``ctx.log`` adds,
and ``exc`` when an exception is attached. A message that is itself a JSON object (the run
summaries and dead-letter lines agentfleet writes) is kept as an object under ``message``.
The secret filter runs before the formatter, so what reaches the JSON is already redacted.
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import UTC, datetime
from typing import Any

__all__ = ["JsonFormatter", "use_json_format"]

_CONTEXT_FIELDS = ("task_id", "run_id", "item_key")


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        message: Any = record.getMessage()
        if isinstance(message, str) and message.startswith("{"):
            with contextlib.suppress(ValueError):
                message = json.loads(message)
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
            "process": record.process,
        }
        for field in _CONTEXT_FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                entry[field] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        return json.dumps(entry, default=str)


def use_json_format() -> int:
    """Give every handler of every logger in the process the JSON formatter; how many changed."""
    formatter = JsonFormatter()
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in logging.root.manager.loggerDict)]
    changed = 0
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if not isinstance(handler.formatter, JsonFormatter):
                handler.setFormatter(formatter)
                changed += 1
    return changed
