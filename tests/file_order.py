"""The order test files run in (the longest first) and how pytest-xdist shares them out.

pytest-xdist's ``--dist loadfile`` hands files to its workers in collection order, so a long
file collected last starts last and finishes alone while the other workers idle. A file's
length is its run time (seconds: setup, call and teardown of its tests) in the runs recorded in
pytest's cache; a file never recorded counts as long when it is marked ``slow``. Files of equal
length keep their collection order, and a file's tests stay together and in their order.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

__all__ = ["SPREAD", "order_longest_first", "record_report", "save_lengths", "work_unit"]

#: pytest's cache key for the seconds each file took, by path relative to the root directory.
CACHE_KEY = "agentfleet/file_seconds"
#: The length (seconds) assumed for a ``slow`` file with no recorded time.
UNRECORDED_SLOW_S = 60.0

_seconds: defaultdict[str, float] = defaultdict(float)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _recorded(config: pytest.Config) -> dict[str, float]:
    cache = getattr(config, "cache", None)  # absent under ``-p no:cacheprovider``
    found = cache.get(CACHE_KEY, {}) if cache is not None else {}
    return {str(path): float(seconds) for path, seconds in found.items()} if isinstance(found, dict) else {}


def order_longest_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Sort ``items`` in place, the files recorded (or marked) longest first."""
    recorded = _recorded(config)
    slow = {_file_of(item.nodeid) for item in items if item.get_closest_marker("slow")}

    def length(item: pytest.Item) -> float:
        path = _file_of(item.nodeid)
        return recorded.get(path, UNRECORDED_SLOW_S if path in slow else 0.0)

    items.sort(key=lambda item: -length(item))


#: Files whose tests each start all they need (no module fixture), long enough to be worth
#: sharing out test by test: pytest-xdist may run them in different processes.
SPREAD = frozenset({"tests/test_docs_examples.py", "tests/test_cli.py"})


def work_unit(nodeid: str) -> str:
    """What pytest-xdist hands out whole: a test's file, or the test alone in a ``SPREAD`` file."""
    path = _file_of(nodeid)
    return nodeid if path in SPREAD else path


def record_report(report: pytest.TestReport) -> None:
    """Add one phase's duration (seconds) to its file's time."""
    _seconds[_file_of(report.nodeid)] += report.duration


def save_lengths(config: pytest.Config) -> None:
    """Merge this run's file times into the cache (by the process that saw every report: the
    only one without xdist, the controller with it; never an xdist worker)."""
    cache = getattr(config, "cache", None)
    if cache is None or hasattr(config, "workerinput") or not _seconds:
        return
    cache.set(CACHE_KEY, {**_recorded(config), **{path: round(s, 2) for path, s in _seconds.items()}})
