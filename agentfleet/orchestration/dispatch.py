"""Dispatching a run: its items taken, recorded and sent a chunk at a time, at the queue's pace.

``Dispatcher.dispatch`` reads the inputs (any iterable: a list, a generator of a million, the
lines of a file) ``dispatch.chunk_items`` at a time, so the client holds one chunk whatever
the run's size. For each chunk it:

1. waits while the run's queue holds more than ``dispatch.max_queued`` messages (the workers
   are behind: sending more would only grow Redis), telling ``progress`` it waits;
2. checks the inputs (``admit``: a ``DispatchError`` names the first bad one);
3. appends the items and their inputs to the run's record, before any of their messages is
   sent (``runs/dispatching.py``), so the reconciler can send whatever is lost afterwards;
4. sends the chunk's messages in one round trip: a one-stage item is stamped from the run's
   ``MessageTemplate`` with no repr of its arguments beyond its redacted input, and pushed
   with the others in one ``LPUSH``; other messages (a pipeline's chains, batches, graph
   steps, staggered starts) go through Celery in one kombu publish batch.

The first chunk is checked before the run is recorded, so a mistake there leaves nothing
behind. A bad input further on stops the dispatch: the run is cancelled (what was sent ends
as cancelled) and the error says how many items had gone. When the broker stays away past
``delivery.client_outage_s`` while sending, the chunks go on being recorded and the
reconciler sends them once it is back.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from celery import Celery
from celery.canvas import Signature

from agentfleet import tracing
from agentfleet.config import Settings
from agentfleet.errors import BrokerUnavailable, DispatchError
from agentfleet.idempotency import canonical_json, text_hash
from agentfleet.orchestration.options import checked_key, no_secret, run_label
from agentfleet.orchestration.priority import prioritized
from agentfleet.orchestration.sending import (
    message_template,
    publish_batch,
    publish_one,
    push_messages,
    queued_messages,
)
from agentfleet.outages import Patience
from agentfleet.protocol.messages import aggregate_signature, item_signature
from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.redaction import SHOWN_REPR_MAX_CHARS, Redactor
from agentfleet.redis_handles import BrokerRedis
from agentfleet.runs import RunStore
from agentfleet.runs.dispatching import DispatchRecord
from agentfleet.transport.layout import queue_keys
from agentfleet.transport.stamping import MessageTemplate, delivery_tags

__all__ = ["Admit", "DispatchProgress", "Dispatcher", "RunPlan", "Signatures"]

log = logging.getLogger("agentfleet.dispatch")

KeyFn = Callable[[Mapping[str, Any]], Any]
Admit = Callable[[list[Any], int], list[dict[str, Any]]]
Signatures = Callable[[list[dict[str, Any]], list[ItemMeta]], list[Signature]]


class _Item(NamedTuple):
    """An item as dispatch knows it: its index, idempotency key and item key."""

    idx: int
    key: str
    item_key: str


@dataclass(frozen=True)
class DispatchProgress:
    """Where a dispatch stands: items sent, messages waiting in the run's queue, and whether it
    is waiting for the workers to catch up."""

    sent: int
    queued: int
    waiting: bool = False


@dataclass(frozen=True)
class RunPlan:
    """What every item of a run is sent as. ``names`` and ``queues`` give each stage's (or graph
    step's) task and queue; ``shared`` are ``ItemMeta`` fields every item carries; ``extra``
    more fields of the run's record. ``fast`` lets one-stage items be stamped from a template
    (no stagger, batch or graph)."""

    run_id: str
    label: str
    kind: str
    names: list[str]
    queues: list[str]
    key: KeyFn | None
    max_in_flight: int | None
    aggregate: str | None
    fail_fast: bool
    priority: int
    stages: int = 1
    shared: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    fast: bool = True


def _texts(chunk: list[dict[str, Any]], start: int) -> list[str]:
    """Each input's canonical JSON (its key's hash, its record and its message are made of it)."""
    texts = []
    for i, item in enumerate(chunk, start):
        try:
            texts.append(canonical_json(item))
        except (TypeError, ValueError) as exc:
            raise DispatchError(f"input {i} is not JSON: {exc}") from None
    return texts


def _chunks(inputs: Iterable[Any], size: int) -> Iterator[list[Any]]:
    it = iter(inputs)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


class Dispatcher:
    """Sends runs through ``app`` to ``broker``, recording them in ``store``; every call rides
    out a Redis outage of ``patience``."""

    def __init__(
        self,
        settings: Settings,
        app: Celery,
        store: RunStore,
        broker: BrokerRedis,
        redactor: Redactor,
        patience: Patience,
    ) -> None:
        self.settings = settings
        self.app = app
        self.store = store
        self.broker = broker
        self.redactor = redactor
        self.patience = patience
        self.record = DispatchRecord(store)
        # The template of the run being dispatched (one run at a time per dispatcher).
        self._template_of: tuple[str, MessageTemplate] | None = None

    def dispatch(
        self,
        plan: RunPlan,
        inputs: Iterable[Any],
        *,
        admit: Admit,
        signatures: Signatures | None = None,
        chunk_items: int | None = None,
        progress: Callable[[DispatchProgress], None] | None = None,
    ) -> int:
        """Record and send every item of ``plan``, ``chunk_items`` (default
        ``dispatch.chunk_items``) at a time; the number of items. ``signatures`` makes the
        messages of a chunk unless ``plan.fast`` lets them be stamped.

        With tracing on, the dispatch is the run's span: every message carries its context and
        the run's record keeps it (``tracing.TRACE_FIELD``) for requeues and resends."""
        plan = self._named(plan)
        attributes = {"agentfleet.run.id": plan.run_id, "agentfleet.run.name": plan.label}
        with tracing.span(f"run {plan.label}", kind="producer", attributes=attributes) as span:
            span.set("agentfleet.run.kind", plan.kind)
            plan = replace(plan, extra={**plan.extra, **tracing.run_fields()})
            sent = self._dispatch(plan, inputs, admit, signatures, chunk_items, progress)
            span.set("agentfleet.run.items", sent)
            return sent

    def _dispatch(
        self,
        plan: RunPlan,
        inputs: Iterable[Any],
        admit: Admit,
        signatures: Signatures | None,
        chunk_items: int | None,
        progress: Callable[[DispatchProgress], None] | None,
    ) -> int:
        knobs = self.settings.dispatch
        chunks = _chunks(inputs, chunk_items or knobs.chunk_items)
        first = admit(next(chunks, []), 0)
        if plan.key is not None:
            # A key refused in the first chunk is refused before the run exists.
            for item in first:
                checked_key(str(plan.key(item)), self.redactor)
        self._patiently_open(plan)
        seen: set[str] = set()
        # Items recorded so far, and of those the ones whose messages went out.
        sent, pushed, broken = 0, 0, False
        for n, chunk in enumerate(itertools.chain([first], (c for c in chunks))):
            if n:
                self._wait_for_room(plan, sent, progress)
                try:
                    chunk = admit(chunk, sent)
                except DispatchError as exc:
                    self._abandon(plan, sent)
                    raise DispatchError(
                        f"{exc}; run {plan.run_id} stopped after {sent} items were sent, and is cancelled"
                    ) from None
            if not chunk:
                continue
            texts = _texts(chunk, sent)
            metas = self._metas(plan, chunk, texts, sent, seen)
            self._record(plan, sent, texts, metas, pushed)
            if not broken:
                broken = not self._send(plan, chunk, texts, metas, signatures)
            sent += len(chunk)
            if not broken:
                pushed = sent
            if progress is not None:
                progress(DispatchProgress(sent, self._queued(plan)))
        self._close(plan, sent)
        return sent

    # Recording ---------------------------------------------------------------------------

    def _named(self, plan: RunPlan) -> RunPlan:
        """``plan`` with its name as stored (redacted, bounded), its tenant checked."""
        tenant = plan.shared.get("tenant")
        if tenant is not None:
            no_secret(str(tenant), "tenant", self.redactor)
        return replace(plan, label=run_label(plan.label, self.redactor))

    def _patiently_open(self, plan: RunPlan) -> None:
        self.patience.call(
            self.record.open,
            plan.run_id,
            name=plan.label,
            kind=plan.kind,
            task=",".join(plan.names),
            queues=plan.queues,
            aggregate=plan.aggregate,
            fail_fast=plan.fail_fast,
            max_in_flight=plan.max_in_flight,
            extra={**plan.extra, "priority": plan.priority},
            promise_s=self.settings.dispatch.promise_s,
        )

    def _metas(
        self, plan: RunPlan, chunk: list[dict[str, Any]], texts: list[str], start: int, seen: set[str]
    ) -> list[_Item]:
        if plan.max_in_flight is not None and plan.max_in_flight < 1:
            raise DispatchError("max_in_flight must be at least 1")
        items = []
        for i, (item, text) in enumerate(zip(chunk, texts, strict=True), start):
            if plan.key is not None:
                key = checked_key(str(plan.key(item)), self.redactor)
                if key in seen:
                    raise DispatchError(f"key= returned {key!r} for two inputs of one run")
                seen.add(key)
                items.append(_Item(i, key, key))
            else:
                items.append(_Item(i, f"{plan.run_id}:{i}:{text_hash(text)}", str(i)))
        return items

    @staticmethod
    def _full_metas(plan: RunPlan, items: list[_Item]) -> list[ItemMeta]:
        return [
            ItemMeta(
                run=plan.run_id,
                idx=it.idx,
                key=it.key,
                item=it.item_key,
                stages=plan.stages,
                max_in_flight=plan.max_in_flight,
                **plan.shared,
            )
            for it in items
        ]

    def _record(self, plan: RunPlan, start: int, texts: list[str], metas: list[_Item], pushed: int) -> None:
        rows = [(f"{plan.run_id}-{m.idx}", m.key, m.item_key) for m in metas]
        promise = self.settings.dispatch.promise_s
        self.patience.call(
            self.record.append, plan.run_id, start, rows, texts, sent=pushed, promise_s=promise
        )

    def _abandon(self, plan: RunPlan, sent: int) -> None:
        self.store.cancel(plan.run_id)
        self._close(plan, sent)

    def _close(self, plan: RunPlan, total: int) -> None:
        state = self.patience.call(self.record.close, plan.run_id, total)
        if state.run_ended and state.aggregate:
            # Every item ended before the last was sent (or there were none): fan in now.
            fanin = aggregate_signature(self.app, plan.run_id, state.aggregate, self.settings.queues.fanin)
            self.patience.call(publish_one, fanin)

    # Sending -----------------------------------------------------------------------------

    def _send(
        self,
        plan: RunPlan,
        chunk: list[dict[str, Any]],
        texts: list[str],
        metas: list[_Item],
        signatures: Signatures | None,
    ) -> bool:
        """Send the chunk's messages; False when the broker stayed away (the reconciler sends them)."""
        try:
            if plan.fast and plan.stages == 1:
                self._stamp(plan, chunk, texts, metas)
            else:
                if signatures is None:
                    raise ValueError("a run whose messages are not stamped needs signatures")
                self._batch(prioritized(signatures(chunk, self._full_metas(plan, metas)), plan.priority))
        except BrokerUnavailable as exc:
            log.warning(
                "run %s: %s; its items are recorded and the reconciler sends them once Redis answers",
                plan.run_id,
                exc,
            )
            return False
        return True

    def _stamp(
        self, plan: RunPlan, chunk: list[dict[str, Any]], texts: list[str], metas: list[_Item]
    ) -> None:
        template = self._template(plan, chunk[0], metas[0])
        # Every item's ``_af`` block is the run's, with its own index and keys (as ``to_kwarg``).
        base = self._full_metas(plan, [_Item(1, "", "")])[0].to_kwarg()
        raws = []
        tags = delivery_tags()
        for text, it in zip(texts, metas, strict=True):
            meta = {**base, "idx": it.idx, "key": it.key, "item": it.item_key}
            if not it.idx:
                del meta["idx"]
            meta_json = json.dumps(meta, separators=(",", ":"))
            if text == "{}":
                kwargs_json = f'{{"{META_KWARG}":{meta_json}}}'
            else:
                kwargs_json = f'{text[:-1]},"{META_KWARG}":{meta_json}}}'
            shown = self.redactor.text(text)[:SHOWN_REPR_MAX_CHARS]
            raws.append(template.build(f"{plan.run_id}-{it.idx}", kwargs_json, shown, tags))
        self.patience.call(push_messages, self.broker, template.key, raws)

    def _template(self, plan: RunPlan, item: dict[str, Any], first: _Item) -> MessageTemplate:
        if self._template_of is None or self._template_of[0] != plan.run_id:
            probe = item_signature(
                self.app,
                names=plan.names,
                queues=plan.queues,
                meta=self._full_metas(plan, [first])[0],
                inputs=item,
                redactor=self.redactor,
                priority=plan.priority,
            )
            template = self.patience.call(message_template, self.app, probe)
            self._template_of = (plan.run_id, template)
        return self._template_of[1]

    def _batch(self, sigs: Sequence[Signature]) -> None:
        self.patience.call(publish_batch, self.app, sigs)

    # Backpressure ------------------------------------------------------------------------

    def _queued(self, plan: RunPlan) -> int:
        """Messages waiting in the run's first queue (every priority list of it)."""
        return self.patience.call(queued_messages, self.broker, queue_keys(plan.queues[0]))

    def _wait_for_room(
        self, plan: RunPlan, sent: int, progress: Callable[[DispatchProgress], None] | None
    ) -> None:
        knobs = self.settings.dispatch
        while (queued := self._queued(plan)) > knobs.max_queued:
            if progress is not None:
                progress(DispatchProgress(sent, queued, waiting=True))
            # Still here: keep the promise the reconciler goes by.
            self.patience.call(self.record.promise, plan.run_id, knobs.promise_s)
            time.sleep(knobs.backpressure_poll_s)
