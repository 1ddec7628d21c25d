"""Pipeline stages: a later stage's input is its previous stage's outcome.

A stage whose previous stage failed passes that failure on unchanged, without claiming; a
later stage carries what the earlier ones spent (attempts, seconds, US dollars); only the
last stage (or a failure) ends the item; a stage sent again carries the previous outcome as
its argument, as a chain sends it; its dead letter names every stage's task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentfleet.tasks.hooks import DeliveryFeature
from agentfleet.tasks.item import previous_stage

if TYPE_CHECKING:
    from agentfleet.models import TaskOutcome
    from agentfleet.tasks.execution import Delivery

__all__ = ["Pipeline"]


class Pipeline(DeliveryFeature):
    name = "pipeline"

    def applies(self, d: Delivery) -> bool:
        return d.meta.stages > 1

    def before_claim(self, d: Delivery) -> dict[str, Any] | None:
        previous = previous_stage(d.args, d.meta)
        if previous is None:
            return None
        if not previous.ok:
            return previous.model_dump(mode="json")
        d.previous = previous
        d.carried = (previous.attempts, previous.duration_s, previous.cost_usd)
        d.kwargs = dict(previous.result or {})
        return None

    def ends_item(self, d: Delivery, outcome: TaskOutcome) -> bool:
        return d.meta.last_stage or not outcome.ok

    def dead_letter(self, d: Delivery, fields: dict[str, Any]) -> None:
        names = d.store.get_run(d.meta.run).get("task", "").split(",")
        fields["stage_tasks"] = [name for name in names if name]

    def message_args(
        self, d: Delivery, kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        return (d.args, {}) if d.meta.stage > 0 else None
