"""Aggregates are named so workers can import them, and a wrong name fails at dispatch."""

from __future__ import annotations

import re

import pytest

from agentfleet import merge
from agentfleet.config import load_settings
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.references import callable_path, resolve_callable


def test_the_documented_merge_helpers_import_by_name_as_workers_import_them() -> None:
    assert resolve_callable("agentfleet.merge:merge_findings") is merge.merge_findings
    assert resolve_callable("agentfleet.merge.concat") is merge.concat


def test_a_function_is_named_by_its_module_and_qualname() -> None:
    assert callable_path(merge.reduce_results) == "agentfleet.merge:reduce_results"


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("agentfleet.no_such_module:concat", "does not import"),
        ("agentfleet.merge:no_such_function", "has no no_such_function"),
        ("agentfleet.merge:DEFAULT_SEVERITY_ORDER", "not a function"),
        ("concat", "module:function"),
    ],
)
def test_a_name_workers_could_not_import_is_refused(path: str, problem: str) -> None:
    with pytest.raises(DispatchError, match=problem):
        callable_path(path)


def test_a_lambda_has_no_name_a_worker_could_import() -> None:
    with pytest.raises(DispatchError, match="module-level function"):
        callable_path(lambda results: results)


def test_a_wrong_aggregate_fails_at_dispatch_before_any_run_exists(redis_url: str, key_prefix: str) -> None:
    with Fleet(load_settings(broker_url=redis_url, key_prefix=key_prefix)) as fleet:
        wrong = "agentfleet.merge:merge_everything"
        with pytest.raises(DispatchError, match=re.escape(f"aggregate {wrong!r}")):
            fleet.map("agentfleet.simulated_agent", [{"item": 1}], aggregate=wrong)
        assert fleet.runs() == []
