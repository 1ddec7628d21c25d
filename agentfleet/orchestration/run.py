"""``Run``: a handle on a dispatched fan-out: stream, wait, quorum, aggregate, summary."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from agentfleet.approvals import Approval, ApprovalStore
from agentfleet.errors import RunError
from agentfleet.models import RunSummary, TaskOutcome
from agentfleet.protocol.messages import request_compensation
from agentfleet.runs import RunStore, UndoLog

if TYPE_CHECKING:
    from celery import Celery

__all__ = ["Run"]

_POLL_MS = 1000

#: After a read that brought back fewer outcomes than a full batch, seconds to let more gather
#: before the next read: a busy run is then read a batch at a time, not one Redis call per
#: outcome. The first outcome after a quiet spell is never delayed (the read blocks for it).
GATHER_S = 0.01

#: Outcomes one read of a run's events brings back at most.
_READ_COUNT = 500


def _block_ms(deadline: float | None) -> int:
    """How long the next read of the run's events may block, in ms: 0 once ``deadline`` passed."""
    if deadline is None:
        return _POLL_MS
    left = deadline - time.monotonic()
    return 0 if left <= 0 else max(1, min(_POLL_MS, int(left * 1000)))


def _gather(deadline: float | None) -> None:
    """Let outcomes gather for ``GATHER_S`` seconds (less if ``deadline`` comes first)."""
    pause = GATHER_S if deadline is None else min(GATHER_S, deadline - time.monotonic())
    if pause > 0:
        time.sleep(pause)


class Run:
    """One run's handle. Cheap to create again from its id (``Fleet.get_run``).

    Every read rides out a broker outage (``delivery.client_outage_s``, through the store the
    ``Fleet`` hands it): a stream of outcomes resumes where it stopped once Redis answers, and
    only a longer outage raises ``BrokerUnavailable``.
    """

    def __init__(
        self,
        run_id: str,
        *,
        store: RunStore,
        app: Celery,
        total: int,
        name: str,
        fanin: str = "agentfleet.fanin",
    ) -> None:
        self.id = run_id
        self.name = name
        self.total = total
        self._store = store
        self._app = app
        self._fanin = fanin

    def __repr__(self) -> str:
        return f"Run(id={self.id!r}, name={self.name!r}, tasks={self.total})"

    def as_completed(self, timeout_s: float | None = None) -> Iterator[TaskOutcome]:
        """Yield each item's outcome as it finishes, in completion order.

        Stops when every item has an outcome, or after ``timeout_s`` seconds (then the items
        still running simply were not yielded; ``wait`` reports them as timed out). An item
        requeued from the dead-letter queue is yielded again with its new outcome.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        seen: set[int] = set()
        last = "0-0"
        while True:
            complete = len(seen) >= self.total
            # Once complete, one last look without waiting: a reopen may follow the last outcome.
            block_ms = None if complete else _block_ms(deadline)
            if block_ms == 0:
                return
            batch = self._store.events(self.id, last, block_ms=block_ms, count=_READ_COUNT)
            if complete and not batch:
                return
            for entry_id, fields in batch:
                last = entry_id
                if fields.get("kind") == "reopen":
                    # A requeued item: its next outcome is the one that counts.
                    seen.discard(int(fields["idx"]))
                    continue
                if fields.get("kind") != "outcome":
                    continue
                idx = int(fields["idx"])
                if idx in seen:
                    continue
                seen.add(idx)
                yield TaskOutcome.model_validate_json(fields["outcome"])
            if 0 < len(batch) < _READ_COUNT and len(seen) < self.total:
                _gather(deadline)

    def wait(self, timeout_s: float | None = None) -> RunSummary:
        """Wait up to ``timeout_s`` seconds; items with no outcome by then count as timed out.

        Timed-out items are listed by task id in ``RunSummary.timed_out_ids``; they go on
        running, and a later ``summary()`` counts them once they finish.
        """
        for _ in self.as_completed(timeout_s):
            pass
        return self.summary(report_timeouts=True)

    def first(self, n: int, timeout_s: float | None = None) -> list[TaskOutcome]:
        """Return once ``n`` items succeed (or time runs out); cancel the rest.

        Items not started yet are revoked and skipped; the run is marked cancelled so no
        delivery that starts later runs either.
        """
        if n < 1:
            raise ValueError("n must be at least 1")
        winners: list[TaskOutcome] = []
        for outcome in self.as_completed(timeout_s):
            if outcome.ok:
                winners.append(outcome)
                if len(winners) >= n:
                    break
        self.cancel(compensate=False)
        return winners

    def cancel(self, *, compensate: bool = True) -> None:
        """Cancel every item that has not finished: none of them starts from now on.

        With ``compensate`` (the default), the run then undoes its succeeded items whose tasks
        declare a compensation, as ``compensate()`` does.
        """
        self._store.cancel(self.id)
        # Parked items are sent again to end cancelled through their delivery: not revoked.
        approvals = self._approvals()
        parked = approvals.parked_indices(self.id)
        approvals.cancel_run(self.id)
        done = self._store.done_indices(self.id) | parked
        pending = [item[0] for idx, item in self._store.items(self.id).items() if idx not in done]
        if pending:
            self._app.control.revoke(pending)
        if compensate:
            self.compensate()

    def compensate(self) -> bool:
        """Undo the run's succeeded work whose tasks declare a compensation: once every item
        has its outcome, each compensation runs once, the most recent success first (see
        ``tasks/compensation.py``). The summary counts them. False when nothing was sent: the
        run was told to compensate before, or it has ended with nothing to undo."""
        return request_compensation(UndoLog(self._store), self._app, self.id, self._fanin)

    def result(self, timeout_s: float | None = None) -> Any:
        """The aggregate's value, waiting up to ``timeout_s`` seconds for it.

        Raises ``RunError`` when the run has no aggregate, the aggregate failed, or time ran out.
        """
        if not self._store.get_run(self.id).get("aggregate"):
            raise RunError(f"run {self.id} has no aggregate; pass aggregate= to Fleet.map")
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last = "0-0"
        while True:
            found = self._store.get_aggregate(self.id)
            if found is not None:
                if not found["ok"]:
                    raise RunError(f"the aggregate of run {self.id} failed: {found['error']}")
                return found["value"]
            block = _block_ms(deadline)
            if block == 0:
                raise RunError(
                    f"the aggregate of run {self.id} was not ready in {timeout_s} s{self._waiting_note()}"
                )
            batch = self._store.events(self.id, last, block_ms=block, count=_READ_COUNT)
            for entry_id, _ in batch:
                last = entry_id
            if 0 < len(batch) < _READ_COUNT:
                _gather(deadline)

    def outcomes(self) -> list[TaskOutcome]:
        """Every outcome recorded so far, in input order."""
        found = self._store.outcomes(self.id)
        return [found[i] for i in sorted(found)]

    def summary(self, *, report_timeouts: bool = False) -> RunSummary:
        """The run's totals now. With ``report_timeouts``, unfinished items count as timed out."""
        timed_out: list[str] = []
        if report_timeouts:
            done = self._store.done_indices(self.id)
            if len(done) < self.total:
                items = self._store.items(self.id)
                timed_out = [items[i][0] for i in sorted(items) if i not in done]
        summary = self._store.summary(self.id, timed_out_ids=timed_out)
        waiting = self.waiting_approval()
        if waiting:
            ids = [a.task_id for a in waiting]
            summary = summary.model_copy(update={"waiting_approval": len(ids), "waiting_approval_ids": ids})
        return summary

    def waiting_approval(self) -> list[Approval]:
        """The run's pauses waiting for a decision now (its parked items), oldest first."""
        return sorted(self._approvals().list(self.id, "pending", None), key=lambda a: a.created_at)

    def _waiting_note(self) -> str:
        """What a timeout says of the items waiting on a person ('' when none are)."""
        waiting = self.waiting_approval()
        if not waiting:
            return ""
        shown = ", ".join(f"item {a.index} ({a.label}, {a.id})" for a in waiting[:5])
        more = f" and {len(waiting) - 5} more" if len(waiting) > 5 else ""
        return f"; {len(waiting)} items wait for a decision: {shown}{more}"

    def _approvals(self) -> ApprovalStore:
        store = self._store
        return ApprovalStore(store.client, prefix=store.prefix, keep_s=store.ttl_s, app=self._app)
