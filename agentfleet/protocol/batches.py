"""The messages of a batched map: several consecutive items in one message.

``Fleet.map(task, inputs, batch_size=N)`` sends one message per ``N`` consecutive items, with
task id ``{run}-b{first index}`` (``names.batch_task_id``) and the keyword ``_afb``: a list of
``[input, item meta]``. How a worker runs one is ``agentfleet.tasks.batch``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from celery import Celery
from celery.canvas import Signature

from agentfleet.protocol.meta import ItemMeta
from agentfleet.protocol.names import batch_task_id
from agentfleet.protocol.reprs import message_reprs
from agentfleet.redaction import Redactor

__all__ = ["BATCH_KWARG", "batch_items", "batch_signatures", "is_batch"]

BATCH_KWARG = "_afb"


def is_batch(kwargs: Mapping[str, Any] | None) -> bool:
    return BATCH_KWARG in (kwargs or {})


def batch_items(kwargs: Mapping[str, Any]) -> list[tuple[dict[str, Any], ItemMeta]]:
    """A batch message's items: each one's input and its meta."""
    return [(dict(inputs), ItemMeta.model_validate(meta)) for inputs, meta in kwargs[BATCH_KWARG]]


def batch_signatures(
    app: Celery,
    *,
    task: str,
    queue: str,
    metas: Sequence[ItemMeta],
    inputs: Sequence[Mapping[str, Any]],
    size: int,
    countdowns: Sequence[float],
    redactor: Redactor | None = None,
) -> list[Signature]:
    """One message per ``size`` consecutive items; ``countdowns`` give each batch's delay. With
    ``redactor``, a message shows only its items' redacted inputs (``items``)."""
    sigs = []
    for n, start in enumerate(range(0, len(metas), size)):
        chunk = [[dict(inputs[i]), metas[i].to_kwarg()] for i in range(start, min(start + size, len(metas)))]
        options: dict[str, Any] = {
            "task_id": batch_task_id(metas[start].run, metas[start].idx),
            "queue": queue,
        }
        if countdowns[n] > 0:
            options["countdown"] = countdowns[n]
        if redactor is not None:
            options.update(message_reprs({"items": [item for item, _ in chunk]}, redactor))
        sigs.append(app.signature(task, kwargs={BATCH_KWARG: chunk}, **options))
    return sigs
