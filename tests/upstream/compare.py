"""Compare two runs of one upstream suite (kombu's stock Redis transport, agentfleet's) test by
test, from the JUnit XML pytest writes, and check the known differences.

A test's result is its last ``<testcase>`` entry (pytest-rerunfailures writes one entry per
attempt; the earlier ones are the reruns). A test *differs* when it fares worse with
agentfleet's transport than with the stock one: passed (or expected to fail) with the stock
transport, and failed, errored, was skipped or did not run with agentfleet's. Every difference
must be listed in ``known_differences.toml`` with its reason and the test of ours that covers
the replacement behaviour, and be named in ``docs/guarantees.md``; any other fails the run.
"""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed")
# How badly a test fared: a difference is a higher rank with agentfleet's transport.
_RANK = {"passed": 0, "xfailed": 0, "skipped": 1, "failed": 2, "error": 2, "not run": 2}
_EXCERPT_LINES = 8
_LINE_CHARS = 160
# A frame's line in a pytest traceback: ``t/integration/test_redis.py:127: AssertionError``.
_LOCATION = re.compile(r"^\S+\.py:\d+:( |$)")


@dataclass(frozen=True)
class Result:
    """One test's result in one run: its outcome, how many times it ran (1 + reruns), and
    for a failure or error the lines that say why."""

    nodeid: str
    outcome: str
    attempts: int = 1
    message: str = ""


@dataclass(frozen=True)
class Difference:
    """A test that fared worse with agentfleet's transport (``agentfleet`` None: not run)."""

    suite: str
    nodeid: str
    stock: Result
    agentfleet: Result | None

    @property
    def key(self) -> tuple[str, str]:
        return (self.suite, self.nodeid)


@dataclass(frozen=True)
class KnownDifference:
    """An entry of ``known_differences.toml``: a difference kept on purpose."""

    suite: str
    test: str
    reason: str
    covered_by: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.suite, self.test)


class KnownDifferenceError(ValueError):
    """``known_differences.toml`` has an entry that is incomplete or not documented."""


def _excerpt(element: ET.Element) -> str:
    """The first line of the failure's message, the ``E`` lines of its traceback, the line of
    the upstream test where it happened and the line where it was raised (each cut short)."""
    text = (element.text or "").splitlines()
    raised = [line.rstrip() for line in text if line.startswith("E ")][:_EXCERPT_LINES]
    # Paths outside the test tree read relative to it (``../../../../agentfleet/...``).
    located = [re.sub(r"^(\.\./)+", "", line).rstrip() for line in text if _LOCATION.match(line)]
    in_test = [line for line in located if line.startswith("t/")][-1:]
    picked = (element.get("message") or "").splitlines()[:1] + raised + in_test
    picked += [line for line in located[-1:] if line not in in_test]
    return "\n".join(line if len(line) <= _LINE_CHARS else line[:_LINE_CHARS] + " ..." for line in picked)


def _entry_result(case: ET.Element, nodeid: str) -> Result:
    for tag, outcome in (("failure", "failed"), ("error", "error")):
        found = case.find(tag)
        if found is not None:
            return Result(nodeid, outcome, message=_excerpt(found))
    skipped = case.find("skipped")
    if skipped is not None:
        return Result(nodeid, "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped")
    return Result(nodeid, "passed")


def _nodeid(case: ET.Element) -> str:
    for prop in case.iter("property"):
        if prop.get("name") == "nodeid":
            return prop.get("value") or ""
    return f"{case.get('classname')}::{case.get('name')}"


def read_junit(path: Path) -> dict[str, Result]:
    """Every test in the JUnit XML at ``path``, by node id, with its final result."""
    results: dict[str, Result] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        nodeid = _nodeid(case)
        previous = results.get(nodeid)
        result = _entry_result(case, nodeid)
        attempts = previous.attempts + 1 if previous else 1
        results[nodeid] = Result(nodeid, result.outcome, attempts, result.message)
    return results


def counts(results: dict[str, Result]) -> Counter[str]:
    """Outcomes counted, plus ``reruns`` (extra attempts) and ``flaky`` (passed on a rerun)."""
    tally: Counter[str] = Counter({outcome: 0 for outcome in OUTCOMES})
    for result in results.values():
        tally[result.outcome] += 1
        tally["reruns"] += result.attempts - 1
        tally["flaky"] += result.outcome == "passed" and result.attempts > 1
    return tally


def differences(suite: str, stock: dict[str, Result], agentfleet: dict[str, Result]) -> list[Difference]:
    """The tests of ``suite`` that fared worse with agentfleet's transport, in stock order."""
    found = []
    for nodeid, before in stock.items():
        after = agentfleet.get(nodeid)
        if _RANK[after.outcome if after else "not run"] > _RANK[before.outcome]:
            found.append(Difference(suite, nodeid, before, after))
    return found


def improvements(stock: dict[str, Result], agentfleet: dict[str, Result]) -> list[str]:
    """The tests that fared better with agentfleet's transport than with the stock one."""
    return [
        nodeid
        for nodeid, after in agentfleet.items()
        if _RANK[after.outcome] < _RANK[stock[nodeid].outcome if nodeid in stock else "not run"]
    ]


def load_known(path: Path, docs: Path, root: Path, suites: set[str]) -> list[KnownDifference]:
    """The entries of ``path``, each checked: every field given, a suite of ``suites``, the test
    named in ``docs``, and ``covered_by`` (``tests/test_x.py::test_name``) an existing test of
    ours under ``root``."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise KnownDifferenceError(f"{path.name} is not valid TOML: {exc}") from exc
    docs_text = docs.read_text()
    known = []
    for number, entry in enumerate(data.get("difference", []), start=1):
        fields = {
            name: str(entry.get(name, "")).strip() for name in ("suite", "test", "reason", "covered_by")
        }
        missing = [name for name, value in fields.items() if not value]
        if missing:
            raise KnownDifferenceError(f"{path.name} entry {number}: missing {', '.join(missing)}")
        if fields["suite"] not in suites:
            raise KnownDifferenceError(f"{path.name} entry {number}: suite must be one of {sorted(suites)}")
        if fields["test"] not in docs_text:
            raise KnownDifferenceError(
                f"{path.name} entry {number}: {docs.name} does not name {fields['test']}"
                " (say there why it differs)"
            )
        test_file, _, test_name = fields["covered_by"].partition("::")
        source = root / test_file
        if (
            not test_name
            or not source.is_file()
            or f"def {test_name.split('[')[0]}(" not in source.read_text()
        ):
            raise KnownDifferenceError(
                f"{path.name} entry {number}: covered_by {fields['covered_by']!r}"
                " is not a test in this repository"
            )
        known.append(KnownDifference(**fields))
    return known


def unexplained(found: list[Difference], known: list[KnownDifference]) -> list[Difference]:
    """The differences that no known-difference entry explains."""
    allowed = {entry.key for entry in known}
    return [difference for difference in found if difference.key not in allowed]


def stale(found: list[Difference], known: list[KnownDifference], suites: set[str]) -> list[KnownDifference]:
    """The entries, for the suites that ran, whose test no longer differs."""
    seen = {difference.key for difference in found}
    return [entry for entry in known if entry.suite in suites and entry.key not in seen]
