"""The points where delivery features attach, and what a feature is.

A delivery (``tasks/execution.py``) is a fixed sequence: claim the item, run the body, record
the outcome, decide what comes next (``tasks/next_step.py``). Everything a run may ask for
beyond one plain item (pipeline stages, graph steps, batches, compensation, fail-fast,
``max_in_flight`` pools, deferral, the aggregate) is a ``DeliveryFeature`` in
``tasks/features/``, registered in ``tasks/features/__init__.py`` in a fixed order. A delivery
keeps the features whose ``applies`` is true for its item and calls them, in that order, at
these points (every hook's default does nothing):

Hook points of a delivery:

- ``before_claim(d)``: before the item is claimed; a dict returned ends the delivery with
  that outcome unchanged (a pipeline stage passing on its previous stage's failure).
- ``before_body(d)``: the item is claimed and is no poison; before its input is validated
  (a graph step reads its input from the steps before it).
- ``hold_during_body(d)``: something held while the body runs, released after it (a pool
  slot); raising ``Deferred`` here defers the item like the body would.
- ``ends_item(d, outcome)``: whether this outcome ends the item for its run (every feature
  must agree: a pipeline's earlier stage or a graph step does not).
- ``before_finish(d, outcome)``: a success about to be stored (noted for compensation).
- ``after_outcome(d, outcome, state)``: the outcome was stored; returns the ``FinishState``
  that stands (a graph step moves its graph on; the run's last outcome sends its aggregate).
- ``on_error(d, err, spent_s, cost_usd)``: the body failed with ``err`` (not a lost claim);
  a feature may reschedule the item here (``d.reschedule``, a deferral), else the retry
  policy decides: a retry, or a final failure.
- ``dead_letter(d, fields)``: add to the dead letter's fields (a pipeline's stage names; the
  files kept as evidence, ``artifacts`` with their bytes in ``artifact_data``). The body's
  context is ``d.context`` (None when the body never ran), its workspace not yet removed.
- ``on_final_failure(d)``: after a final failure was recorded (fail-fast cancels the run).
- ``message_args(d, kwargs)``: the ``(args, kwargs)`` of the message sent again, when not
  the item's own input (a later pipeline stage carries its previous stage's outcome).
- ``reschedule(d, meta, countdown_s)``: send the item again yourself; True when done (an
  item of a batch goes alone).

Hook points of the reconciler (``tasks/reconciler.py``), asked for every active run:

- ``ended_run(rec, run_id, record)``: the run's items all ended; the run-level messages this
  feature may have lost (a ``Candidate`` list, ``[]``: none lost but the run stays active),
  or None when the feature has nothing to do for the run (the aggregate, the compensation).
- ``resting(rec, run_id)``: the indices of a run's items this feature keeps out of the
  reconciler's look: neither lost nor to be sent again (an item parked for a decision).
- ``open_items(rec, run_id, record, items)``: the items of a run this feature drives, as
  candidates, or None when it does not drive the run (a graph's open steps).
- ``stands_for(run_id, record, index)``: more task ids whose message stands for item ``index`` (its
  batch's).
- ``recover(rec, candidate, stale, report, now)``: send a candidate this feature returned
  again, past the grace.

A new feature is one module in ``tasks/features/`` and one line in its registry.

A delivery calls at each point only the features whose class overrides that hook (``plan``):
most points of a plain item have none, and a call that does nothing still costs a Python call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentfleet.errors import AgentfleetError
    from agentfleet.models import TaskOutcome
    from agentfleet.protocol.meta import ItemMeta
    from agentfleet.runs import FinishState
    from agentfleet.tasks.execution import Delivery
    from agentfleet.tasks.reconciler import PassReport, Reconciler

__all__ = [
    "DELIVERY_HOOKS",
    "RECONCILER_HOOKS",
    "Candidate",
    "DeliveryFeature",
    "Held",
    "message_args",
    "overrides",
    "plan",
    "taking_part",
]

#: The hook points of a delivery, as ``DeliveryFeature`` names them.
DELIVERY_HOOKS = (
    "before_claim",
    "before_body",
    "hold_during_body",
    "ends_item",
    "before_finish",
    "after_outcome",
    "on_error",
    "dead_letter",
    "on_final_failure",
    "message_args",
    "reschedule",
)

#: The reconciler's hook points (``recover`` is asked of the feature that named a candidate).
RECONCILER_HOOKS = ("ended_run", "resting", "open_items", "stands_for", "recover")


class Held(Protocol):
    """What a feature holds while the body runs."""

    def release(self) -> None: ...


@dataclass
class Candidate:
    """Something of a run the reconciler may send again: an item (``index``) or a run-level
    message, under ``slot`` (its name among the run's suspects), sent again by ``feature``
    (None: a plain item, stages included)."""

    run_id: str
    slot: str
    task_ids: list[str]
    record: dict[str, str]
    index: int | None = None
    item: tuple[str, str, str] | None = None
    feature: DeliveryFeature | None = None


class DeliveryFeature:
    """A feature of the delivery and of the reconciler; see the module docstring for when
    each hook is called. Subclasses override the hooks they need."""

    name = "feature"

    def applies(self, d: Delivery) -> bool:
        """Whether this feature takes part in delivery ``d`` (asked once per delivery)."""
        return True

    def before_claim(self, d: Delivery) -> dict[str, Any] | None:
        return None

    def before_body(self, d: Delivery) -> None:
        return None

    def hold_during_body(self, d: Delivery) -> Held | None:
        return None

    def ends_item(self, d: Delivery, outcome: TaskOutcome) -> bool:
        return True

    def before_finish(self, d: Delivery, outcome: TaskOutcome) -> None:
        return None

    def after_outcome(self, d: Delivery, outcome: TaskOutcome, state: FinishState) -> FinishState:
        return state

    def on_error(self, d: Delivery, err: AgentfleetError, spent_s: float, cost_usd: float) -> None:
        return None

    def dead_letter(self, d: Delivery, fields: dict[str, Any]) -> None:
        return None

    def on_final_failure(self, d: Delivery) -> None:
        return None

    def message_args(
        self, d: Delivery, kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        return None

    def reschedule(self, d: Delivery, meta: ItemMeta, countdown_s: float) -> bool:
        return False

    # The reconciler ------------------------------------------------------------------------

    def ended_run(self, rec: Reconciler, run_id: str, record: dict[str, str]) -> list[Candidate] | None:
        return None

    def resting(self, rec: Reconciler, run_id: str) -> set[int]:
        return set()

    def open_items(
        self, rec: Reconciler, run_id: str, record: dict[str, str], items: dict[int, tuple[str, str, str]]
    ) -> list[Candidate] | None:
        return None

    def stands_for(self, run_id: str, record: dict[str, str], index: int) -> list[str]:
        return []

    def recover(
        self, rec: Reconciler, candidate: Candidate, stale: list[str], report: PassReport, now: float
    ) -> None:
        return None


def overrides(feature: DeliveryFeature, hook: str) -> bool:
    """Whether ``feature`` does something at ``hook``: its class overrides the default."""
    return getattr(type(feature), hook) is not getattr(DeliveryFeature, hook)


@functools.cache
def plan(features: tuple[DeliveryFeature, ...]) -> dict[str, tuple[DeliveryFeature, ...]]:
    """For each hook of a delivery or the reconciler, the ones of ``features`` that act there,
    in their order (worked out once for each set of features)."""
    hooks = (*DELIVERY_HOOKS, *RECONCILER_HOOKS)
    return {hook: tuple(f for f in features if overrides(f, hook)) for hook in hooks}


@functools.cache
def _asking(features: tuple[DeliveryFeature, ...]) -> tuple[DeliveryFeature, ...]:
    return tuple(f for f in features if overrides(f, "applies"))


@functools.cache
def _chosen(
    features: tuple[DeliveryFeature, ...], answers: tuple[bool, ...]
) -> dict[str, tuple[DeliveryFeature, ...]]:
    said = dict(zip(_asking(features), answers, strict=True))
    return plan(tuple(f for f in features if said.get(f, True)))


def message_args(d: Delivery) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The ``(args, kwargs)`` of the message that sends delivery ``d``'s item again: its own
    input unless a feature shapes them (``message_args``: a later pipeline stage keeps its
    previous stage's outcome as its input), the meta keyword not yet added."""
    args: tuple[Any, ...] = ()
    kwargs = dict(d.kwargs)
    for feature in d.hooks["message_args"]:
        shaped = feature.message_args(d, kwargs)
        if shaped is not None:
            args, kwargs = shaped
    return args, kwargs


def taking_part(features: tuple[DeliveryFeature, ...], d: Delivery) -> dict[str, tuple[DeliveryFeature, ...]]:
    """The ``plan`` of the ones of ``features`` that take part in delivery ``d``: ``applies`` is
    asked only of the features that override it (the others take part in every delivery), and
    the plan is worked out once for each set of answers."""
    return _chosen(features, tuple([f.applies(d) for f in _asking(features)]))
