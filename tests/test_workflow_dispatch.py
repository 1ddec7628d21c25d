"""What dispatch checks of graphs and run options, before anything is sent."""

from __future__ import annotations

import pytest

from agentfleet import Node
from agentfleet.config import load_settings
from agentfleet.errors import DispatchError
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.graph import graph_spec


def _spec(*steps: tuple[str, list[str]]) -> list[str]:
    return graph_spec([(name, f"t.{name}", "q", after) for name, after in steps]).names


def test_steps_are_put_after_their_dependencies_keeping_the_given_order_otherwise() -> None:
    assert _spec(("report", ["b", "a"]), ("b", ["a"]), ("a", []), ("c", [])) == ["a", "c", "b", "report"]


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "at least one step"),
        ([("a", []), ("a", [])], "'a' is used twice"),
        ([("1a", [])], "start with a letter"),
        ([("a", ["nope"])], "waits for 'nope', which is not a step"),
        ([("a", ["a"])], "waits for itself"),
        ([("a", ["b"]), ("b", ["a"]), ("c", [])], "'a', 'b' wait for each other in a cycle"),
    ],
)
def test_a_bad_graph_is_refused_with_the_reason(steps: list[tuple[str, list[str]]], message: str) -> None:
    with pytest.raises(DispatchError, match=message):
        _spec(*steps)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tenant": "a b"}, "tenant must be 1 to 100 letters"),
        ({"budget_usd": 0}, "budget_usd must be above 0"),
        ({"batch_size": 0}, "batch_size must be at least 1"),
    ],
)
def test_bad_run_options_fail_at_dispatch(
    redis_url: str, key_prefix: str, options: dict, message: str
) -> None:
    with Fleet(load_settings(broker_url=redis_url, key_prefix=key_prefix)) as fleet:
        with pytest.raises(DispatchError, match=message):
            fleet.map("t.echo", [{"n": 1}], **options)
        assert fleet.runs() == [], "nothing was recorded or sent"


def test_a_graph_with_a_cycle_sends_nothing(redis_url: str, key_prefix: str) -> None:
    with Fleet(load_settings(broker_url=redis_url, key_prefix=key_prefix)) as fleet:
        with pytest.raises(DispatchError, match="cycle"):
            fleet.graph([Node("a", "t.a", after=["b"]), Node("b", "t.b", after=["a"])], [{"n": 1}])
        assert fleet.runs() == []
