"""The secret filter on every log handler of a worker, beat or Flower process, and the service.

Worker and beat import the built-in task modules (this one among them) before they set up
logging; Celery then signals ``after_setup_logger`` and ``after_setup_task_logger``, and
the filter goes on every handler there is (a prefork pool's children inherit them). Importing
this module puts it on logging's last-resort handler, which writes what a task module logs
while it is imported, before Celery's logging is set up; other handlers of a process that
merely imports the built-in tasks are left alone. Flower
sets up its logging first and imports the task modules afterwards: ``flower_setup`` then
calls ``install_secret_filter``, as ``agentfleet serve`` does once uvicorn has configured
its loggers.

With ``log_json`` set, the same hooks give every handler the JSON formatter
(``agentfleet.log_format``).

The filter redacts with the settings' redactor: secret-named keys, every configured
credential, the LLM key, the service token, Flower's password and the Redis password.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import after_setup_logger, after_setup_task_logger

from agentfleet.config import get_settings
from agentfleet.log_filter import SecretFilter, install
from agentfleet.log_format import use_json_format
from agentfleet.redaction import Redactor

__all__ = ["install_secret_filter", "process_redactor", "secret_filter"]


def _redactor() -> Redactor:
    return get_settings().redactor()


secret_filter = SecretFilter(_redactor)
"""The process's one filter."""


def process_redactor() -> Redactor:
    """The settings' redactor, shared by the process and rebuilt at most once a second.

    Building one reads every credential and compiles its patterns: a delivery borrows this
    one (and adds its input's own secrets) instead of paying that per item.
    """
    return secret_filter.redactor()


def install_secret_filter() -> int:
    """Put the process's filter on every handler that lacks it (and, with ``log_json``, the
    JSON formatter); how many handlers got the filter."""
    if get_settings().log_json:
        use_json_format()
    return install(secret_filter)


@after_setup_logger.connect
@after_setup_task_logger.connect
def _on_logging_set_up(**_: Any) -> None:
    install_secret_filter()


if logging.lastResort is not None and secret_filter not in logging.lastResort.filters:
    logging.lastResort.addFilter(secret_filter)
