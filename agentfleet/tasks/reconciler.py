"""The reconciler: no run stays ``running`` because a message was lost.

A message can vanish although every worker acknowledges late: kombu pops it with ``BRPOP`` and
records it as unacknowledged a round trip later (a worker killed in between loses it), and
Redis itself loses up to a second of writes when it dies with ``appendfsync everysec``. A dead
worker's unacknowledged messages come back only after the broker's visibility timeout (an
hour by default). The reconciler brings every such item back within a minute:

Every ``delivery.reconcile_interval_s`` seconds, the one worker holding the reconciler's lock
(the claim ``reconciler``, renewed each pass) looks at each active run. An item with no
outcome, no live claim on any of its stages and no message waiting for it (queued, or
unacknowledged with a future countdown or taken moments ago: see ``waiting.py``; an item of a
batched map also waits while its batch's message does) becomes a
suspect; still one ``delivery.reconcile_grace_s`` seconds later, it is published again with its
own task id and idempotency key from the stage it had reached, any stale unacknowledged copy is
dropped, and the run counts it as ``recovered``. Items of a cancelled run are given their
cancelled outcome instead. An item a feature keeps resting (parked for a decision,
``tasks/features/approval.py``) is none of the reconciler's business while it rests.

What else a run may have lost is the features' to say (``tasks/hooks.py``, asked in their
registry's order): a run whose items all ended but whose aggregate was never stored has its
aggregate sent again (``tasks/features/aggregate.py``); likewise its compensation, while one
is requested and not running (``tasks/features/compensation.py``). For a dependency graph
(``tasks/features/graph.py``), an item's open steps (released, without a status) are what
must have a claim or a message; missing ones are sent again, and an item whose steps all
ended but whose outcome is missing gets it. Suspects are kept by item index, or by the
feature's name for a run-level message.

Publishing again is safe because a second copy never runs the body while the first holds its
claim, and an item that has an outcome returns it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from celery import Celery

from agentfleet import tracing
from agentfleet.approvals.resume import sweep
from agentfleet.idempotency import stage_key
from agentfleet.models import TaskOutcome
from agentfleet.protocol.messages import item_signature, recorded_priority
from agentfleet.protocol.meta import ItemMeta, run_meta_fields
from agentfleet.redis_client import broker_client
from agentfleet.redis_handles import BrokerRedis
from agentfleet.runs import new_claim_token, take_lock
from agentfleet.runs.dispatching import DispatchRecord, dispatch_deadline
from agentfleet.tasks.features import FEATURES
from agentfleet.tasks.hooks import Candidate, plan
from agentfleet.tasks.item import cancelled_outcome
from agentfleet.tasks.runtime import WorkerRuntime
from agentfleet.transport.broker_view import BrokerView, forget_stale, read_broker

__all__ = ["PassReport", "Reconciler", "start_reconciler"]

log = logging.getLogger("agentfleet.reconciler")

_LOCK = "reconciler"


@dataclass
class PassReport:
    """What one pass did: whether it held the lock, runs looked at, items sent again, cancelled
    outcomes given, aggregates and compensations sent again, and whether the broker could be
    read in full."""

    acted: bool = False
    runs: int = 0
    recovered: list[str] = field(default_factory=list)
    cancelled: int = 0
    aggregates: int = 0
    compensations: int = 0
    complete: bool = True


class Reconciler:
    """Finds lost items and sends them again (see the module docstring), for the worker
    runtime ``rt`` (its settings, run store and graph state)."""

    def __init__(
        self, rt: WorkerRuntime, app: Celery, *, node: str = "reconciler", broker: BrokerRedis | None = None
    ) -> None:
        self.rt = rt
        self.settings = rt.settings
        self.app = app
        self.store = rt.runs
        # kombu's queues and unacknowledged messages live on the broker, which may not be
        # where the run store is (``state_url``).
        self.broker = broker if broker is not None else broker_client(self.settings)
        self.token = new_claim_token(node)

    # The lock ------------------------------------------------------------------------------

    def _hold_lock(self) -> bool:
        ttl_s = self.settings.delivery.reconcile_interval_s * 3
        return take_lock(self.store, _LOCK, self.token, ttl_s)

    def release(self) -> None:
        """Give up the lock, so another worker takes over at its next pass."""
        self.store.release_claim(_LOCK, self.token)

    # A pass --------------------------------------------------------------------------------

    def pass_once(self, now: float | None = None) -> PassReport:
        """Look at every active run once; act only while holding the lock."""
        report = PassReport()
        if not self._hold_lock():
            return report
        report.acted = True
        now = time.time() if now is None else now
        sweep(self.rt.approvals, self.app, now, self.settings.delivery.reconcile_grace_s)
        candidates: list[Candidate] = []
        queues: set[str] = {self.settings.queues.fanin}
        for run_id in self.store.active_runs():
            record = self.store.get_run(run_id)
            if not record:
                self.store.deactivate(run_id)
                continue
            report.runs += 1
            queues.update(q for q in record.get("queues", "").split(",") if q)
            record = self._dispatch_settled(run_id, record, now)
            candidates.extend(self._candidates(run_id, record))
        if not candidates:
            return report
        delivery = self.settings.delivery
        view = read_broker(
            self.broker,
            sorted(queues),
            grace_s=delivery.reconcile_grace_s,
            max_scan=delivery.reconcile_max_scan,
            now=now,
        )
        report.complete = view.complete
        by_run: dict[str, list[Candidate]] = {}
        for candidate in candidates:
            by_run.setdefault(candidate.run_id, []).append(candidate)
        for run_id, found in by_run.items():
            self._judge(run_id, found, view, now, report)
        return report

    def _dispatch_settled(self, run_id: str, record: dict[str, str], now: float) -> dict[str, str]:
        """The run's record, its dispatch taken over if its dispatcher broke its promise (it
        died): the run then has the items it recorded, and those never sent are lost messages."""
        deadline = dispatch_deadline(record)
        if deadline is None or deadline > now:
            return record
        log.warning("run %s: its dispatcher stopped; it keeps the items recorded so far", run_id)
        DispatchRecord(self.store).close(run_id, int(record.get("tasks_total") or 0))
        return self.store.get_run(run_id)

    def _candidates(self, run_id: str, record: dict[str, str]) -> list[Candidate]:
        """Items (or run-level messages, as the features answer) of one run with no outcome
        and no live claim; while its dispatch goes on, only items whose messages it has sent."""
        sending = dispatch_deadline(record) is not None
        total = int(record.get("sent" if sending else "tasks_total") or 0)
        done = self.store.done_indices(run_id)
        if sending and len(done) >= total:
            return []
        if len(done) >= total:
            for feature in plan(FEATURES)["ended_run"]:
                ended = feature.ended_run(self, run_id, record)
                if ended is not None:
                    return ended
            self.store.deactivate(run_id)
            return []
        resting = set().union(*(feature.resting(self, run_id) for feature in plan(FEATURES)["resting"]))
        pending = [i for i in range(total) if i not in done and i not in resting]
        if not pending:
            return []
        items = self.store.items(run_id, pending)
        for feature in plan(FEATURES)["open_items"]:
            driven = feature.open_items(self, run_id, record, items)
            if driven is not None:
                return driven
        return self._open_items(run_id, record, items)

    def _open_items(
        self, run_id: str, record: dict[str, str], items: dict[int, tuple[str, str, str]]
    ) -> list[Candidate]:
        """Items of a map or a pipeline with no live claim on any of their stages."""
        stages = len(record.get("task", "").split(","))
        keys = {i: [stage_key(item[1], s, stages) for s in range(stages)] for i, item in items.items()}
        alive = self.store.live_claims([k for i in items for k in keys[i]])
        found = []
        standing = plan(FEATURES)["stands_for"]
        for n, (i, item) in enumerate(items.items()):
            if any(alive[n * stages : (n + 1) * stages]):
                continue
            meta = ItemMeta(run=run_id, idx=i, key=item[1], item=item[2], stages=stages)
            task_ids = [meta.model_copy(update={"stage": s}).task_id for s in range(stages)]
            for feature in standing:
                task_ids.extend(feature.stands_for(run_id, record, i))
            found.append(Candidate(run_id, str(i), task_ids, record, i, item))
        return found

    def _judge(
        self, run_id: str, found: list[Candidate], view: BrokerView, now: float, report: PassReport
    ) -> None:
        seen = self.store.suspects(run_id)
        # A set: a run of many thousands of queued items would make the next line quadratic.
        waiting = {c.slot for c in found if any(t in view.waiting for t in c.task_ids)}
        missing = [c for c in found if c.slot not in waiting]
        cleared = [i for i in waiting if i in seen]
        if not view.complete:
            self.store.mark_suspects(run_id, {}, cleared)
            return
        due = [
            c
            for c in missing
            if c.slot in seen and now - seen[c.slot] >= self.settings.delivery.reconcile_grace_s
        ]
        fresh = {c.slot: now for c in missing if c.slot not in seen}
        for candidate in due:
            stale = [tag for t in candidate.task_ids for tag in view.stale.get(t, [])]
            self._recover(candidate, stale, report, now)
        self.store.mark_suspects(run_id, fresh, [*cleared, *(c.slot for c in due)])

    # Sending again -------------------------------------------------------------------------

    def _recover(self, candidate: Candidate, stale: list[str], report: PassReport, now: float) -> None:
        """Send ``candidate`` again in the pass at ``now`` (epoch seconds; with the item's task
        id, the recovery counted once however often its count is sent); with tracing on, in a
        span of the run's trace (what is sent carries it)."""
        attributes = {"agentfleet.run.id": candidate.run_id, "agentfleet.item.index": candidate.index}
        parent = candidate.record.get(tracing.TRACE_FIELD)
        with tracing.span("resend item", kind="producer", attributes=attributes, parent=parent):
            self._resend(candidate, stale, report, now)

    def _resend(self, candidate: Candidate, stale: list[str], report: PassReport, now: float) -> None:
        record, run_id = candidate.record, candidate.run_id
        if candidate.feature is not None:
            candidate.feature.recover(self, candidate, stale, report, now)
            return
        meta = self._meta(candidate, record)
        if record.get("status") in ("cancelled", "failed"):
            self.store.finish(cancelled_outcome(meta, meta.task_id), store=False)
            report.cancelled += 1
            return
        signature = self._signature(meta, record)
        if signature is None:
            return
        forget_stale(self.broker, stale)
        signature.apply_async()
        self.store.incr(run_id, "recovered", event=f"{meta.task_id} {now!r}")
        report.recovered.append(meta.task_id)
        log.warning(
            "run %s: item %s had lost its message; sent it again from stage %d", run_id, meta.item, meta.stage
        )

    def _meta(self, candidate: Candidate, record: dict[str, str]) -> ItemMeta:
        assert candidate.item is not None and candidate.index is not None
        names = record.get("task", "").split(",")
        _, key, item_key = candidate.item
        keys = [stage_key(key, s, len(names)) for s in range(len(names))]
        stored = self.store.stored_outcomes(keys[:-1])
        stage = next((s for s, outcome in enumerate(stored) if outcome is None), len(names) - 1)
        return ItemMeta(
            run=candidate.run_id,
            idx=candidate.index,
            key=key,
            item=item_key,
            stage=stage,
            stages=len(names),
            attempt=len(self.store.attempt_errors(keys[stage])),
            **run_meta_fields(record),
        )

    def _signature(self, meta: ItemMeta, record: dict[str, str]) -> Any:
        names = record.get("task", "").split(",")
        queues = [q for q in record.get("queues", "").split(",") if q]
        if len(queues) != len(names):
            queues = [self.settings.queues.agents] * len(names)
        if meta.stage == 0:
            inputs = self.store.item_inputs(meta.run, [meta.idx]).get(meta.idx)
            if inputs is None:
                self._lost_input(meta)
                return None
            return item_signature(
                self.app,
                names=names,
                queues=queues,
                meta=meta,
                inputs=inputs,
                priority=recorded_priority(record),
            )
        before = stage_key(meta.key, meta.stage - 1, meta.stages)
        previous = self.store.stored_outcomes([before])[0]
        assert previous is not None
        return item_signature(
            self.app,
            names=names,
            queues=queues,
            meta=meta,
            previous=previous.model_dump(mode="json"),
            priority=recorded_priority(record),
        )

    def _lost_input(self, meta: ItemMeta) -> None:
        # Only a Redis that lost the run's inputs but kept its items gets here: end the item.
        outcome = TaskOutcome(
            task_id=meta.task_id,
            run_id=meta.run,
            item_key=meta.item,
            index=meta.idx,
            idempotency_key=meta.key,
            ok=False,
            error_type="ItemLost",
            error="the item's message and its stored input were both lost; dispatch it again",
        )
        self.store.finish(outcome, store=False)
        log.error("run %s: item %s lost its message and its input", meta.run, meta.item)


def start_reconciler(rt: WorkerRuntime, app: Celery, *, node: str) -> threading.Event:
    """Run passes every ``delivery.reconcile_interval_s`` seconds in a daemon thread until the
    returned event is set; the lock then goes at once to another worker."""
    settings = rt.settings
    reconciler = Reconciler(rt, app, node=node)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                reconciler.pass_once()
            except Exception as exc:
                # Redis away, or a broker read that failed: the next pass tries again.
                log.warning("reconciler pass failed: %s", exc)
            stop.wait(settings.delivery.reconcile_interval_s)
        with contextlib.suppress(Exception):
            reconciler.release()

    threading.Thread(target=loop, name="agentfleet-reconciler", daemon=True).start()
    return stop
