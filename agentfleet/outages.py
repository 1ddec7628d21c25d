"""Riding out Redis outages, for calls that are safe to send twice and for no others.

A broker restart, a Sentinel failover or a dropped connection makes Redis calls fail for a few
seconds. A call that failed so may have reached Redis before its reply was lost: sending it
again runs it twice. So one rule decides what is tried again:

- ``@repeatable`` marks a function or method whose second run with the same arguments changes
  nothing the first did not: reads; writes that set rather than add; scripts guarded by what
  the call carries (a run counter moves once per event id, an attempt's record is appended
  once, an outcome is counted once per item); and publishing a task message, which the
  delivery contract makes safe (a second copy finds the claim or the stored outcome). Where
  the repeat cannot tell that the first call did the work (it finds an outcome already
  counted), it does nothing, and what the first call would have set off next is left to the
  reconciler, which finds it missing.
- ``Patience(budget_s=..., url=...)`` says how long a caller rides out an outage:
  ``patience.call(fn, *args, **kwargs)`` calls ``fn`` again after transient Redis errors for up
  to ``budget_s`` seconds from the first error (waits growing from 0.1 s to 2 s, with jitter),
  then raises one ``BrokerUnavailable`` naming the Redis, its password masked;
  ``patience.wrap(store)`` is ``store`` with each marked method called so. A function or method
  that is not marked is refused at once with ``TypeError``, before anything is sent: a call
  that may add twice belongs to a caller that knows what a repeat means.
- A refused password is not an outage: ``ConfigError`` at once, saying so.

Below this, redis-py re-sends a command that met a dropped connection a few times within
about a second (``agentfleet.redis_client``); the run store's writes are written for that too.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar, cast

import redis
from kombu.exceptions import OperationalError

from agentfleet.broker_check import credentials_refused, refused_error
from agentfleet.errors import BrokerUnavailable
from agentfleet.redis_client import mask_url

__all__ = ["TRANSIENT_REDIS_ERRORS", "Patience", "is_repeatable", "repeatable"]

P = ParamSpec("P")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])
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
_MARK = "__agentfleet_repeatable__"


def repeatable(fn: F) -> F:
    """Mark ``fn`` safe to call again with the same arguments after a dropped connection (its
    docstring says why); ``Patience`` calls nothing else again."""
    setattr(fn, _MARK, True)
    return fn


def is_repeatable(fn: object) -> bool:
    """Whether ``fn`` (a function, or a method bound to its object) is marked ``@repeatable``."""
    return bool(getattr(fn, _MARK, False))


def _name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))


@dataclass(frozen=True)
class Patience:
    """How long calls ride out a Redis outage: ``budget_s`` seconds; ``url`` names the Redis in
    the error (its password masked), ``what`` says what it is."""

    budget_s: float
    url: str
    what: str = "Redis"
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)``, called again after transient Redis errors for up to
        ``budget_s`` seconds from the first. Raises ``TypeError`` at once when ``fn`` is not
        ``@repeatable``, ``BrokerUnavailable`` once the budget is spent, ``ConfigError`` at once
        when Redis refused the credentials; other errors pass through."""
        if not is_repeatable(fn):
            raise TypeError(
                f"{_name(fn)} is not marked @repeatable: a call that may have reached Redis is "
                "not sent again unless a second run changes nothing"
            )
        return self._again(fn, *args, **kwargs)

    def _again(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        # ``call`` once ``fn`` is known to be repeatable; the budget counts from the first error.
        deadline = 0.0
        wait_s = _FIRST_WAIT_S
        failures = 0
        while True:
            try:
                return fn(*args, **kwargs)
            except TRANSIENT_REDIS_ERRORS as exc:
                if credentials_refused(exc):
                    raise refused_error(self.url, exc) from None
                failures += 1
                now = time.monotonic()
                if failures == 1:
                    deadline = now + max(0.0, self.budget_s)
                left = deadline - now
                if left <= 0:
                    raise BrokerUnavailable(
                        f"{self.what} at {mask_url(self.url)} did not answer for {self.budget_s:g} s "
                        f"({type(exc).__name__}: {exc})"
                    ) from None
                if failures == 1:
                    log.warning(
                        "%s at %s is not answering (%s); retrying", self.what, mask_url(self.url), exc
                    )
                self.sleep(min(left, wait_s * random.uniform(0.5, 1.0)))
                wait_s = min(_MAX_WAIT_S, wait_s * 2)

    def wrap(self, target: T) -> T:
        """``target``, each of whose ``@repeatable`` methods rides out outages as ``call`` does;
        asking it for a public method that is not marked raises ``TypeError``. Other attributes
        (and private names) are ``target``'s own."""
        return cast(T, _Patient(target, self))


class _Patient:
    def __init__(self, target: Any, patience: Patience) -> None:
        self._target = target
        self._patience = patience

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        if not is_repeatable(attr):
            raise TypeError(
                f"{type(self._target).__name__}.{name} is not marked @repeatable, so it is not "
                "called through Patience; call it on the object itself"
            )
        again = self._patience._again

        def call(*args: Any, **kwargs: Any) -> Any:
            return again(attr, *args, **kwargs)

        # Kept on the proxy: the next lookup of ``name`` finds it without coming back here.
        self.__dict__[name] = call
        return call
