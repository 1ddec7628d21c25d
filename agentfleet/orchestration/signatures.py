"""Each run kind's messages for a chunk of its items, and the stagger of their starts.

``Dispatcher.dispatch`` hands a chunk of items (inputs and metas) to one of these and sends
what it returns (``orchestration/dispatch.py``). The messages themselves are built by the
protocol (``agentfleet.protocol``), as the workers build the ones they send again.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from celery import Celery
from celery.canvas import Signature

from agentfleet.orchestration.dispatch import RunPlan, Signatures
from agentfleet.protocol.batches import batch_signatures
from agentfleet.protocol.graphs import step_meta, step_signature
from agentfleet.protocol.messages import cap_countdown, item_signature
from agentfleet.protocol.meta import ItemMeta
from agentfleet.redaction import Redactor
from agentfleet.runs import GraphSpec

__all__ = ["batches", "chains", "graph_roots", "stagger"]


def stagger(count: int, stagger_s: float, max_countdown_s: float) -> list[float]:
    """``count`` start delays spread over ``stagger_s`` seconds with jitter, each at most
    ``max_countdown_s`` (the broker's visibility timeout would deliver a longer one twice)."""
    if stagger_s <= 0 or count == 0:
        return [0.0] * count
    step = stagger_s / count
    return [cap_countdown(i * step + random.uniform(0, step * 0.5), max_countdown_s) for i in range(count)]


def chains(app: Celery, plan: RunPlan, starts: Sequence[float] | None, redactor: Redactor) -> Signatures:
    """Each item's message (a chain for a pipeline), starting at ``starts[index]`` if given."""

    def signatures(items: list[dict[str, Any]], metas: list[ItemMeta]) -> list[Signature]:
        return [
            item_signature(
                app,
                names=plan.names,
                queues=plan.queues,
                meta=meta,
                inputs=item,
                countdown_s=starts[meta.idx] if starts else 0.0,
                redactor=redactor,
            )
            for item, meta in zip(items, metas, strict=True)
        ]

    return signatures


def batches(
    app: Celery, plan: RunPlan, size: int, starts: Sequence[float] | None, redactor: Redactor
) -> Signatures:
    """One message per ``size`` consecutive items, batch ``n`` starting at ``starts[n]`` if given."""

    def signatures(items: list[dict[str, Any]], metas: list[ItemMeta]) -> list[Signature]:
        first = metas[0].idx // size
        count = -(-len(metas) // size)
        delays = starts[first : first + count] if starts else [0.0] * count
        return batch_signatures(
            app,
            task=plan.names[0],
            queue=plan.queues[0],
            metas=metas,
            inputs=items,
            size=size,
            countdowns=delays,
            redactor=redactor,
        )

    return signatures


def graph_roots(
    app: Celery, spec: GraphSpec, starts: Sequence[float] | None, redactor: Redactor
) -> Signatures:
    """Each item's root steps (they read their inputs when they run)."""

    def signatures(items: list[dict[str, Any]], metas: list[ItemMeta]) -> list[Signature]:
        return [
            step_signature(
                app,
                spec,
                step_meta(meta, root.name),
                countdown_s=starts[meta.idx] if starts else 0.0,
                redactor=redactor,
            )
            for meta in metas
            for root in spec.roots
        ]

    return signatures
