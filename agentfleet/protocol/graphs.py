"""The message of one step of a dependency graph.

Each step of an item is a message of its own (task id ``{run}-{idx}-n-{step}``), never a
chord or a nested chain: the graph is driven from the run store (``agentfleet.runs.graph``).
A step sent without its input reads it when it runs (``agentfleet.tasks.graph``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import Celery
from celery.canvas import Signature

from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.protocol.reprs import message_reprs
from agentfleet.redaction import Redactor
from agentfleet.runs import GraphSpec

__all__ = ["step_meta", "step_signature"]


def step_meta(meta: ItemMeta, step: str) -> ItemMeta:
    """The meta of ``meta``'s item at ``step``, which has spent nothing yet."""
    return meta.model_copy(
        update={"node": step, "attempt": 0, "deferrals": 0, "elapsed_s": 0.0, "cost_usd": 0.0}
    )


def step_signature(
    app: Celery,
    spec: GraphSpec,
    meta: ItemMeta,
    *,
    inputs: Mapping[str, Any] | None = None,
    countdown_s: float = 0.0,
    redactor: Redactor | None = None,
) -> Signature:
    """The message of step ``meta.node`` of an item; without ``inputs`` it reads its input
    when it runs. With ``redactor``, the message shows only its redacted inputs (as
    ``item_signature``'s do)."""
    step = spec[meta.node]
    options: dict[str, Any] = {"task_id": meta.task_id, "queue": step.queue}
    if countdown_s > 0:
        options["countdown"] = countdown_s
    kwargs = {**(inputs or {}), META_KWARG: meta.to_kwarg()}
    if redactor is not None:
        options.update(message_reprs(kwargs, redactor))
    return app.signature(step.task, kwargs=kwargs, **options)
