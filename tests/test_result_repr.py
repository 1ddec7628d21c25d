"""The quick repr of a fleet item's outcome reads as Celery's ``saferepr`` does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from celery.app import trace
from celery.utils.saferepr import saferepr

from agentfleet.models import TaskOutcome
from agentfleet.transport.result_repr import OutcomeDict, install, quick_saferepr


def _outcome(result: Any) -> OutcomeDict:
    outcome = TaskOutcome(
        task_id="r1-0", run_id="r1", item_key="0", ok=True, result=result, attempts=1,
        duration_s=0.25, idempotency_key="r1:0:abc", index=0,
    )  # fmt: skip
    return OutcomeDict(outcome.model_dump(mode="json"))


@pytest.mark.parametrize(
    "result",
    [
        {"item": 3, "slept_s": 0.0},
        {"text": "naïve café ✓", "quotes": 'it\'s "quoted"', "flags": [1, 2.5, None, True]},
        None,
        ["a", "b"],
    ],
    ids=["small", "unicode-and-quotes", "none", "list"],
)
def test_it_gives_the_same_text_as_saferepr(result: Any) -> None:
    outcome = _outcome(result)
    assert quick_saferepr(outcome, 1024) == saferepr(dict(outcome), 1024)


def test_nesting_deeper_than_saferepr_shows_is_shown_whole() -> None:
    outcome = _outcome({"nested": {"a": [1, 2]}})
    assert "[...]" in saferepr(dict(outcome), 1024)
    assert "'nested': {'a': [1, 2]}" in quick_saferepr(outcome, 1024)


def test_a_long_outcome_is_cut_at_the_same_length() -> None:
    outcome = _outcome({"page": "x" * 5000})
    text = quick_saferepr(outcome, 1024)
    assert len(text) <= 1024 + len("...") and text.endswith("...")
    assert text[:200] == saferepr(dict(outcome), 1024)[:200]


def test_other_values_go_to_saferepr() -> None:
    plain = {"a": 1}
    assert quick_saferepr(plain, 1024) == saferepr(plain, 1024)
    looped: list[Any] = []
    looped.append(looped)
    assert quick_saferepr(looped, 100) == saferepr(looped, 100)


def test_an_outcome_dict_is_a_plain_dict_to_json_and_equality() -> None:
    outcome = _outcome({"item": 1})
    assert json.loads(json.dumps(outcome)) == outcome == dict(outcome)


def test_install_swaps_the_tracers_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "saferepr", saferepr)
    install()
    install()
    assert trace.saferepr is quick_saferepr
