"""The delivery's hook points: features attach there, the core names none of them.

The first tests read the core's code (its names, not its prose); the last one registers a
feature of its own and finds the reconciler asking it what it may recover, against a real
Redis with no worker.
"""

from __future__ import annotations

import io
import time
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest
from stranded import reconciling_settings

from agentfleet.config import Settings
from agentfleet.orchestration import Fleet
from agentfleet.tasks import reconciler as reconciler_module
from agentfleet.tasks.features import FEATURES
from agentfleet.tasks.hooks import (
    DELIVERY_HOOKS,
    RECONCILER_HOOKS,
    Candidate,
    DeliveryFeature,
    overrides,
    plan,
)
from agentfleet.tasks.reconciler import PassReport, Reconciler
from agentfleet.tasks.runtime import runtime

TASKS = Path(__file__).resolve().parents[1] / "agentfleet" / "tasks"

# Words of the features; the core (the delivery's sequence, what comes next, the reconciler)
# reaches them only through the hooks.
FEATURE_WORDS = ("graph", "compensat", "fail_fast", "in_flight", "pool", "deferred", "aggregate_signature")
# The pass report's counters, which the features fill in.
REPORT_FIELDS = {"aggregates", "compensations"}


def _names(path: Path) -> set[str]:
    """The identifiers of a module's code (no strings, no comments)."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return {tok.string for tok in tokens if tok.type == tokenize.NAME}


@pytest.mark.parametrize("module", ["execution.py", "next_step.py", "reconciler.py"])
def test_the_core_names_no_feature(module: str) -> None:
    names = _names(TASKS / module) - REPORT_FIELDS
    found = sorted(n for n in names for word in FEATURE_WORDS if word in n.lower())
    assert found == []


@pytest.mark.parametrize("module", ["next_step.py", "reconciler.py"])
def test_only_the_entry_point_knows_a_batch(module: str) -> None:
    assert not [n for n in _names(TASKS / module) if "batch" in n.lower()]


def test_no_sentinel_index_stands_for_a_run_level_message() -> None:
    source = (TASKS / "reconciler.py").read_text()
    assert "_AGGREGATE" not in source and "_COMPENSATION" not in source
    assert "index == -" not in source


def test_every_feature_module_is_registered_once_in_a_fixed_order() -> None:
    names = [f.name for f in FEATURES]
    modules = sorted(p.stem for p in (TASKS / "features").glob("*.py") if p.stem != "__init__")
    assert len(names) == len(set(names)) == len(modules)
    assert {type(f).__module__.rsplit(".", 1)[1] for f in FEATURES} == set(modules)
    # A graph step moves its graph on before the aggregate looks at whether the run ended,
    # and a lost aggregate is sent again before a lost compensation.
    assert names.index("graph") < names.index("aggregate") < names.index("compensation")


class _Body(DeliveryFeature):
    name = "body"

    def before_body(self, d: object) -> None:  # type: ignore[override]
        return None


class _Ends(_Body):
    name = "ends"

    def ends_item(self, d: object, outcome: object) -> bool:  # type: ignore[override]
        return False


def test_a_delivery_calls_at_each_hook_only_the_features_that_act_there() -> None:
    body, ends, idle = _Body(), _Ends(), DeliveryFeature()
    hooks = plan((body, ends, idle))
    assert hooks["before_body"] == (body, ends)  # inherited from a feature class counts
    assert hooks["ends_item"] == (ends,)
    assert hooks["after_outcome"] == hooks["on_error"] == ()
    assert set(hooks) == {*DELIVERY_HOOKS, *RECONCILER_HOOKS}
    assert plan((body, ends, idle)) is hooks  # worked out once per set of features
    # Every hook a feature of the registry overrides is a delivery hook or a reconciler's.
    reconciler_hooks = {*RECONCILER_HOOKS, "applies"}
    for feature in FEATURES:
        own = {n for n in vars(type(feature)) if callable(getattr(DeliveryFeature, n, None))}
        assert own <= set(DELIVERY_HOOKS) | reconciler_hooks, (feature.name, own)
        assert any(overrides(feature, hook) for hook in (*DELIVERY_HOOKS, *reconciler_hooks))


class _Probe(DeliveryFeature):
    """A feature of the test's own: it drives every run and recovers a message named probe."""

    name = "probe"

    def __init__(self) -> None:
        self.recovered: list[tuple[str, str]] = []

    def open_items(
        self, rec: Reconciler, run_id: str, record: dict[str, str], items: dict[int, tuple[str, str, str]]
    ) -> list[Candidate] | None:
        return [Candidate(run_id, self.name, [f"{run_id}-probe"], record, feature=self)]

    def recover(
        self, rec: Reconciler, candidate: Candidate, stale: list[str], report: PassReport, now: float
    ) -> None:
        self.recovered.append((candidate.run_id, candidate.slot))


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return reconciling_settings(redis_url, "hk")


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as made:
        yield made


def test_a_registered_feature_is_asked_what_it_may_recover(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = _Probe()
    monkeypatch.setattr(reconciler_module, "FEATURES", (probe, *FEATURES))
    run = fleet.map("t.echo", [{"n": 1}])
    reconciler = Reconciler(runtime(fleet.settings), fleet.app, node="test")
    now = time.time()
    assert reconciler.pass_once(now=now).acted
    assert fleet.store.suspects(run.id) == {"probe": now}
    assert reconciler.pass_once(now=now + 1).recovered == []
    assert probe.recovered == []  # within the grace
    reconciler.pass_once(now=now + 10)
    assert probe.recovered == [(run.id, "probe")]
    assert fleet.store.suspects(run.id) == {}
