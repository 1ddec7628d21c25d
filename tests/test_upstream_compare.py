"""The comparison behind ``make test-upstream``: which upstream tests fare worse with agentfleet's
transport, read from the JUnit XML pytest writes, and when a known difference may excuse one."""

from __future__ import annotations

from pathlib import Path

import pytest
from upstream import compare

NODE = "t/integration/test_redis.py::test_RedisPriority::test_publish_consume[None]"
OTHER = "t/integration/test_redis.py::test_failed_credentials"


def _case(nodeid: str, body: str = "") -> str:
    classname, _, name = nodeid.rpartition("::")
    props = f'<properties><property name="nodeid" value="{nodeid}" /></properties>'
    return f'<testcase classname="{classname}" name="{name}" time="0.1">{props}{body}</testcase>'


def _junit(tmp_path: Path, name: str, *cases: str) -> Path:
    path = tmp_path / name
    path.write_text(f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>')
    return path


FAILURE = (
    '<failure message="socket.timeout: timed out">'
    "def test_publish_consume(self, connection):\n"
    ">       conn.drain_events(timeout=1)\n"
    "E       TimeoutError: timed out\n"
    "t/integration/test_redis.py:225: TimeoutError</failure>"
)


def test_a_test_passing_with_stock_and_failing_with_agentfleet_is_a_difference_with_its_reason(
    tmp_path: Path,
) -> None:
    stock = compare.read_junit(_junit(tmp_path, "s.xml", _case(NODE), _case(OTHER)))
    ours = compare.read_junit(_junit(tmp_path, "a.xml", _case(NODE, FAILURE), _case(OTHER)))

    found = compare.differences("kombu", stock, ours)

    assert [d.nodeid for d in found] == [NODE]
    assert found[0].agentfleet is not None
    assert found[0].agentfleet.message.splitlines() == [
        "socket.timeout: timed out",
        "E       TimeoutError: timed out",
        "t/integration/test_redis.py:225: TimeoutError",
    ]


def test_reruns_count_as_attempts_and_the_last_entry_is_the_result(tmp_path: Path) -> None:
    # pytest-rerunfailures writes one testcase per attempt; only the last carries the outcome.
    results = compare.read_junit(_junit(tmp_path, "a.xml", _case(NODE), _case(NODE), _case(NODE, FAILURE)))

    assert results[NODE].outcome == "failed"
    assert results[NODE].attempts == 3
    tally = compare.counts(results)
    assert (tally["failed"], tally["passed"], tally["reruns"]) == (1, 0, 2)


def test_failing_with_both_transports_or_not_run_under_stock_is_no_difference(tmp_path: Path) -> None:
    stock = compare.read_junit(_junit(tmp_path, "s.xml", _case(NODE, FAILURE)))
    ours = compare.read_junit(_junit(tmp_path, "a.xml", _case(NODE, FAILURE), _case(OTHER, FAILURE)))

    assert compare.differences("kombu", stock, ours) == []


def test_a_skip_or_a_missing_test_with_agentfleet_is_a_difference(tmp_path: Path) -> None:
    stock = compare.read_junit(_junit(tmp_path, "s.xml", _case(NODE), _case(OTHER)))
    ours = compare.read_junit(_junit(tmp_path, "a.xml", _case(NODE, '<skipped message="no redis" />')))

    found = compare.differences("kombu", stock, ours)

    assert [(d.nodeid, d.agentfleet.outcome if d.agentfleet else None) for d in found] == [
        (NODE, "skipped"),
        (OTHER, None),
    ]


def test_an_expected_failure_is_as_good_as_a_pass(tmp_path: Path) -> None:
    xfail = '<skipped type="pytest.xfail" message="Issue #6437" />'
    stock = compare.read_junit(_junit(tmp_path, "s.xml", _case(NODE, xfail)))
    ours = compare.read_junit(_junit(tmp_path, "a.xml", _case(NODE)))

    assert stock[NODE].outcome == "xfailed"
    assert compare.differences("celery", stock, ours) == []
    assert compare.differences("celery", ours, stock) == []


def _known(tmp_path: Path, entry: str, docs: str) -> list[compare.KnownDifference]:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_ours.py").write_text("def test_acks_reach_redis_in_time():\n    pass\n")
    (tmp_path / "known.toml").write_text(entry)
    (tmp_path / "guarantees.md").write_text(docs)
    return compare.load_known(tmp_path / "known.toml", tmp_path / "guarantees.md", tmp_path, {"kombu"})


ENTRY = f"""
[[difference]]
suite = "kombu"
test = "{NODE}"
reason = "one look takes the whole window"
covered_by = "tests/test_ours.py::test_acks_reach_redis_in_time"
"""


def test_a_documented_known_difference_excuses_its_test_only(tmp_path: Path) -> None:
    known = _known(tmp_path, ENTRY, f"`{NODE}` differs because ...")
    found = [
        compare.Difference("kombu", NODE, compare.Result(NODE, "passed"), None),
        compare.Difference("kombu", OTHER, compare.Result(OTHER, "passed"), None),
    ]

    assert [d.nodeid for d in compare.unexplained(found, known)] == [OTHER]
    assert compare.stale(found[1:], known, {"kombu"}) == known


@pytest.mark.parametrize(
    ("entry", "docs", "complaint"),
    [
        (ENTRY, "nothing about it", "does not name"),
        (ENTRY.replace("test_acks_reach_redis_in_time", "test_gone"), NODE, "is not a test"),
        (ENTRY.replace('reason = "one look takes the whole window"', ""), NODE, "missing reason"),
        (ENTRY.replace('suite = "kombu"', 'suite = "amqp"'), NODE, "suite must be one of"),
        ("[[difference]\n", NODE, "not valid TOML"),
    ],
)
def test_a_known_difference_needs_a_reason_its_docs_and_a_covering_test(
    tmp_path: Path, entry: str, docs: str, complaint: str
) -> None:
    with pytest.raises(compare.KnownDifferenceError, match=complaint):
        _known(tmp_path, entry, docs)


def test_the_shipped_known_differences_are_each_documented_and_covered() -> None:
    # load_known raises on an entry without its reason, its place in the docs or a covering test.
    root = Path(__file__).resolve().parent.parent
    compare.load_known(
        root / "tests" / "upstream" / "known_differences.toml",
        root / "docs" / "guarantees.md",
        root,
        {"kombu", "celery"},
    )
