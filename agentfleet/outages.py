"""Riding out Redis outages: a call is tried again with backoff until an outage budget is spent.

A broker restart, a Sentinel failover or a dropped connection makes Redis calls fail for a few
seconds. Callers that can safely repeat a call (reads, and agentfleet's own scripts, which are
written to be run twice) wrap it in ``ride_out``; after ``budget_s`` seconds of failures the
caller gets one ``BrokerUnavailable`` naming the broker, its password masked. A refused
password is not an outage: it raises ``ConfigError`` at once, saying so.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis
from kombu.exceptions import OperationalError

from agentfleet.broker_check import credentials_refused, refused_error
from agentfleet.errors import BrokerUnavailable
from agentfleet.redis_client import mask_url

__all__ = ["TRANSIENT_REDIS_ERRORS", "patient", "ride_out"]

T = TypeVar("T")
log = logging.getLogger("agentfleet.outages")

#: Errors that say "Redis is not reachable right now", not "this command is wrong". A
#: ``ReadOnlyError`` comes from a former master after a failover, until clients move on;
#: kombu's ``OperationalError`` is a publish that its own retries could not get through.
TRANSIENT_REDIS_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    redis.ReadOnlyError,
    OperationalError,
    ConnectionError,
    TimeoutError,
)

_FIRST_WAIT_S = 0.1
_MAX_WAIT_S = 2.0


def ride_out(
    call: Callable[[], T],
    *,
    budget_s: float,
    url: str,
    what: str = "Redis",
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, tried again after transient Redis errors for up to ``budget_s`` seconds.

    Waits grow from 0.1 s to 2 s with jitter. Raises ``BrokerUnavailable`` (naming ``what`` and
    ``url`` with its password masked) once the budget is spent; raises ``ConfigError`` at once
    when Redis refused the credentials; other errors pass through.
    """
    deadline = time.monotonic() + max(0.0, budget_s)
    wait_s = _FIRST_WAIT_S
    failures = 0
    while True:
        try:
            return call()
        except TRANSIENT_REDIS_ERRORS as exc:
            if credentials_refused(exc):
                raise refused_error(url, exc) from None
            failures += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrokerUnavailable(
                    f"{what} at {mask_url(url)} did not answer for {budget_s:g} s "
                    f"({type(exc).__name__}: {exc})"
                ) from None
            if failures == 1:
                log.warning("%s at %s is not answering (%s); retrying", what, mask_url(url), exc)
            sleep(min(left, wait_s * random.uniform(0.5, 1.0)))
            wait_s = min(_MAX_WAIT_S, wait_s * 2)


class _Patient:
    """Calls each method of ``target`` through ``ride_out``; other attributes pass through."""

    def __init__(self, target: Any, budget_s: float, url: str) -> None:
        self._target = target
        self._budget_s = budget_s
        self._url = url

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return ride_out(lambda: attr(*args, **kwargs), budget_s=self._budget_s, url=self._url)

        return call


def patient(target: T, *, budget_s: float, url: str) -> T:
    """``target``, each of whose method calls rides out Redis outages of ``budget_s`` seconds.

    Only for objects whose methods are safe to call again after a dropped connection (the run
    store and the dead-letter store are written so).
    """
    return cast(T, _Patient(target, budget_s, url))
