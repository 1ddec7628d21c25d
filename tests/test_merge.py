"""Fan-in helpers."""

from __future__ import annotations

from agentfleet.merge import (
    concat,
    item_fingerprint,
    merge_structured,
    reduce_results,
    successful_results,
)
from agentfleet.models import TaskOutcome


def test_concat_splices_lists_and_appends_the_rest() -> None:
    assert concat([[1, 2], 3, [4]]) == [1, 2, 3, 4]


def test_structured_merge_drops_duplicates_and_sorts_by_severity() -> None:
    results = [
        {
            "findings": [
                {"rule": "eval", "file": "a.py", "severity": "high"},
                {"rule": "todo", "severity": "low"},
            ]
        },
        {"findings": [{"rule": "eval", "file": "a.py", "severity": "high"}]},
        {"findings": [{"rule": "password", "file": "b.py", "severity": "critical"}]},
    ]
    merged = merge_structured(results)
    assert [f["rule"] for f in merged["findings"]] == ["password", "eval", "todo"]
    assert merged["duplicates_removed"] == 1
    assert merged["sources"] == 3


def test_item_fingerprint_over_chosen_fields_ignores_the_others() -> None:
    a = {"rule": "eval", "file": "a.py", "message": "one wording"}
    b = {"rule": "eval", "file": "a.py", "message": "another wording"}
    assert item_fingerprint(a, ["rule", "file"]) == item_fingerprint(b, ["rule", "file"])
    assert item_fingerprint(a) != item_fingerprint(b)
    merged = merge_structured([{"findings": [a]}, {"findings": [b]}], fingerprint_fields=["rule", "file"])
    assert merged["findings"] == [a]


def test_unknown_severities_sort_last() -> None:
    merged = merge_structured([{"findings": [{"severity": "weird"}, {"severity": "info"}]}])
    assert [f["severity"] for f in merged["findings"]] == ["info", "weird"]


def test_reduce_folds_left_to_right() -> None:
    assert reduce_results(lambda acc, r: [*acc, r * 2], [1, 2, 3], []) == [2, 4, 6]


def test_failed_outcomes_never_reach_a_merge() -> None:
    outcomes = [
        TaskOutcome(task_id="t1", run_id="r", item_key="0", ok=True, result={"findings": [{"x": 1}]}),
        TaskOutcome(task_id="t2", run_id="r", item_key="1", ok=False, error="boom"),
    ]
    assert successful_results(outcomes) == [{"findings": [{"x": 1}]}]
