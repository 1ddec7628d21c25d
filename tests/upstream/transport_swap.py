"""A pytest plugin loaded into kombu's and Celery's own test suites (``-p transport_swap``).

``AGENTFLEET_UPSTREAM_TRANSPORT`` picks the classes behind kombu's Redis schemes (``redis``,
``rediss``, ``sentinel``) for the whole test process (the Celery session worker runs in it,
and its prefork children inherit it):

- ``stock``: kombu's own classes, untouched;
- ``agentfleet``: for each scheme, the class agentfleet's own configuration picks for it
  (``agentfleet.transport.broker_transport``: its ``RedisTransport`` for ``redis://``, its
  ``SentinelTransport`` for ``sentinel://``, kombu's for ``rediss://``), put in kombu's
  transport aliases (public ``kombu.transport.TRANSPORT_ALIASES``) before any test module is
  imported, so every ``Connection('redis://...')`` the tests make resolves to it.

The plugin counts the Redis transports the test process makes (``Connection.create_transport``)
and fails the session (exit code 4) when it made one of a library class other than those, or
none for ``redis://``, so a run can never compare a transport with itself. Classes the suites
define themselves (kombu's ``_LegacySentinelTransport``) are theirs to choose. It also adds
each test's node id to the JUnit XML (a ``nodeid`` property), so the two runs can be compared
test by test.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

import kombu
import kombu.transport
import kombu.transport.redis
import pytest

ENV = "AGENTFLEET_UPSTREAM_TRANSPORT"
CHOICES = ("stock", "agentfleet")
SCHEMES = ("redis", "rediss", "sentinel")
# What Celery's broker_transport setting names for agentfleet's Redis transport.
AGENTFLEET_REDIS = "agentfleet.transport.redis_channel:RedisTransport"
_LIBRARIES = ("kombu.", "agentfleet.")
_made: Counter[str] = Counter()
_expected: dict[str, str] = {}


def _choice() -> str:
    which = os.environ.get(ENV, "")
    if which not in CHOICES:
        raise pytest.UsageError(f"{ENV} must be one of {list(CHOICES)}, not {which!r}")
    return which


def _dotted(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _put_agentfleet_in_place() -> None:
    from agentfleet.transport import broker_transport, enabled

    if not enabled("redis_transport"):
        raise pytest.UsageError(
            "agentfleet's Redis transport is off (a kombu or redis-py private name it extends "
            "does not hold at this version): there is nothing to compare"
        )
    for scheme in SCHEMES:
        chosen = broker_transport(f"{scheme}://127.0.0.1:6379/0")
        if chosen:
            kombu.transport.TRANSPORT_ALIASES[scheme] = chosen


def _counting(create: Callable[[kombu.Connection], Any]) -> Callable[[kombu.Connection], Any]:
    @functools.wraps(create)
    def create_transport(self: kombu.Connection) -> Any:
        transport = create(self)
        if isinstance(transport, kombu.transport.redis.Transport):
            _made[_dotted(type(transport))] += 1
        return transport

    return create_transport


def _unexpected() -> list[str]:
    """The library classes made that the choice does not put behind a scheme, and the
    ``redis://`` class when none of it was made."""
    chosen = set(_expected.values())
    wrong = [name for name in _made if name.startswith(_LIBRARIES) and name not in chosen]
    return wrong + ([] if _made[_expected["redis"]] else [f"no {_expected['redis']}"])


def pytest_configure(config: pytest.Config) -> None:
    if _choice() == "agentfleet":
        _put_agentfleet_in_place()
    for scheme in SCHEMES:
        resolved = kombu.transport.get_transport_cls(scheme)
        if resolved is None:
            raise pytest.UsageError(f"kombu has no transport for {scheme}://")
        _expected[scheme] = _dotted(resolved)
    if _choice() == "agentfleet" and _expected["redis"] != AGENTFLEET_REDIS:
        raise pytest.UsageError(f"redis:// resolves to {_expected['redis']}, not {AGENTFLEET_REDIS}")
    kombu.Connection.create_transport = _counting(kombu.Connection.create_transport)  # type: ignore[method-assign]


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [f"{scheme}:// transport: {name}" for scheme, name in _expected.items()]


def pytest_itemcollected(item: pytest.Item) -> None:
    item.user_properties.append(("nodeid", item.nodeid))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexpected():
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    made = ", ".join(f"{name} x{count}" for name, count in sorted(_made.items())) or "none"
    terminalreporter.write_line(f"Redis transports made in this process: {made}")
    wrong = _unexpected()
    if wrong:
        terminalreporter.write_line(
            f"not the transports chosen ({', '.join(wrong)}): this run compares nothing"
        )
