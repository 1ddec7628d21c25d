"""Keep secrets out of log lines: one filter for every handler, and a redacting task logger.

``SecretFilter`` is a ``logging.Filter`` that rewrites each record it sees before the handler
formats it: the message (with its arguments filled in), the exception text and the stack
text pass through a ``Redactor``, so no library's log line (httpx writing a URL, Celery
writing a task's return value, a traceback quoting a header) writes a secret. ``install``
adds one filter to every handler of every logger in the process, and to logging's
last-resort handler; run it after the process has set up its logging (the Celery and
service start-up hooks do). A record is redacted once, however many handlers it reaches.
Fields other than the message, exception and stack text (a formatter's ``extra`` fields)
are not rewritten.

``RedactingAdapter`` is the logger a task gets as ``ctx.log``: it redacts what the task
logs before any handler sees it, with the redactor of that task's delivery (which also knows
the secret values of the task's own input).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from agentfleet.redaction import Redactor

__all__ = ["RedactingAdapter", "SecretFilter", "install"]

_DONE = "_agentfleet_redacted"


def _render(msg: object, args: Any) -> str:
    try:
        return str(msg) % args if args else str(msg)
    except (TypeError, ValueError, KeyError):
        # A malformed call must not break logging; show both parts, still redacted later.
        return f"{msg!r} {args!r}"


def _exception_text(exc_info: Any) -> str:
    if isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    elif not isinstance(exc_info, tuple):
        exc_info = sys.exc_info()
    if exc_info[0] is None:
        return ""
    return logging.Formatter().formatException(exc_info)


class SecretFilter(logging.Filter):
    """Redacts every record it sees with the redactor ``source()`` returns.

    The redactor is rebuilt at most every ``refresh_s`` seconds, so a rotated credential is
    known within that time without rebuilding it for each line.
    """

    def __init__(self, source: Callable[[], Redactor], *, refresh_s: float = 1.0) -> None:
        super().__init__()
        self._source = source
        self._refresh_s = refresh_s
        self._redactor: Redactor | None = None
        self._built_at = 0.0
        self._lock = threading.Lock()

    def redactor(self) -> Redactor:
        """The current redactor (rebuilt when older than ``refresh_s``)."""
        now = time.monotonic()
        if self._redactor is None or now - self._built_at >= self._refresh_s:
            with self._lock:
                if self._redactor is None or now - self._built_at >= self._refresh_s:
                    self._redactor = self._source()
                    self._built_at = now
        return self._redactor

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, _DONE, False):
            return True
        redactor = self.redactor()
        record.msg = redactor.text(_render(record.msg, record.args))
        record.args = ()
        if record.exc_info and not record.exc_text:
            record.exc_text = _exception_text(record.exc_info)
        if record.exc_text:
            record.exc_text = redactor.text(record.exc_text)
        if record.stack_info:
            record.stack_info = redactor.text(record.stack_info)
        setattr(record, _DONE, True)
        return True


def install(secret_filter: SecretFilter) -> int:
    """Add ``secret_filter`` to every handler in the process that has no ``SecretFilter`` yet.

    Covers the root logger, every named logger and logging's last-resort handler. Returns
    the number of handlers it added the filter to.
    """
    loggers: list[logging.Logger] = [logging.getLogger()]
    known = list(logging.Logger.manager.loggerDict.values())
    loggers.extend(logger for logger in known if isinstance(logger, logging.Logger))
    handlers = [handler for logger in loggers for handler in logger.handlers]
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    added = 0
    for handler in dict.fromkeys(handlers):
        if not any(isinstance(existing, SecretFilter) for existing in handler.filters):
            handler.addFilter(secret_filter)
            added += 1
    return added


class RedactingAdapter(logging.LoggerAdapter[logging.Logger]):
    """A ``LoggerAdapter`` that redacts message, arguments and exception text with ``redactor``."""

    def __init__(self, logger: logging.Logger, extra: Mapping[str, object], redactor: Redactor) -> None:
        super().__init__(logger, extra)
        self.redactor = redactor

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        text = _render(msg, args)
        exc_info = kwargs.pop("exc_info", None)
        if exc_info:
            text = f"{text}\n{_exception_text(exc_info)}"
        if kwargs.pop("stack_info", False):
            text = f"{text}\nStack (most recent call last):\n{''.join(traceback.format_stack()[:-1])}"
        clean, options = self.process(self.redactor.text(text), kwargs)
        self.logger.log(level, clean, **options)
