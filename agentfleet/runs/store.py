"""The run store: run records, one key per item outcome, counters by ``HINCRBY``, claims.

Layout under the key prefix ``p`` (``<id>`` is a run id, ``<key>`` an item's idempotency key;
names from ``agentfleet.keys``, whose docstring explains the Redis Cluster hash tags). Every
key expires after ``ttl_s`` seconds unless noted:

- ``p:run:{<id>}``          hash: name, kind, task names, queues, totals, status, times, the
                            counters, the aggregate's path, result and deliveries
                            (``aggregate_attempts``, ``tasks/fanin.py``); and as they apply:
                            budgets (``budgets.py``), graphs (``graph.py``), compensation
                            (``undo.py``), ``tenant``, ``batch_size``, ``priority``
- ``p:run:{<id>}:items``    hash: item index -> ``[task_id, idempotency key, item key]``
- ``p:run:{<id>}:inputs``   hash: item index -> its input, kept until the item has an outcome
                            so that a lost message can be published again
- ``p:run:{<id>}:done``     hash: item index -> 1, the guard that counts each item once
- ``p:run:{<id>}:events``   stream: each outcome in completion order, then ``end``; ``reopen``
                            when a dead-lettered item is requeued (its next outcome follows);
                            ``aggregate`` once the aggregate is stored
- ``p:run:{<id>}:spans``    list: the run's timeline, one short entry per outcome, retried or
                            deferred attempt and passed stage (index, worker lane, end, ms,
                            kind, cost; ``runs/spans.py``); about 30 bytes an entry
- ``p:run:{<id>}:lanes``    hash: worker node -> its lane number in ``spans``
- ``p:run:{<id>}:suspect``  hash: item index -> epoch seconds the reconciler first found it
                            with no outcome, no claim and no message (``tasks/reconciler.py``)
- ``p:run:{<id>}:counted``  hash: ``<counter> <event id>`` -> 1 for each event ``incr`` counted,
                            so that an event is counted once
- ``p:out:{<tag>}...``      an item's stored outcome, under its idempotency key
- ``p:mem:{<tag>}...``      the item's steps, checkpoints and spending (``runs/memory.py``);
                            set to expire with the outcome when the outcome is stored
- ``p:claim:{<tag>}...``    string, the token of the delivery running the item; expires
                            ``claim_ttl_s`` after its last renewal (see ``runs/claims.py``)
- ``p:errs:{<tag>}...``     list: the last 50 failed attempts of an item (type, message, time)
- ``p:deliv:{<tag>}...:<task id>``  deliveries of a task id that have not finished (poison
                            detection); expires four visibility timeouts after the first;
                            ``...:<task id>:<claim token>`` marks one counted under a batch's
                            token (expiring with the claim): a start sent twice counts once
- ``p:runs:active``         set: runs that are running or waiting for their aggregate (no
                            expiry; the reconciler drops runs that ended or expired)
- ``p:runs``                sorted set: run ids by creation time; ids older than ``ttl_s``
                            (their records have expired) are dropped as runs are created
- ``p:stats``               hash: fleet-wide counters since the first run (items by outcome,
                            dead letters, cost in US dollars, worker seconds, runs started and
                            finished) and ``last_done_at``, the epoch seconds of the last item
                            counted; never expires (written by ``runs/tally.py``)
- ``p:stats:done:<s>``      items counted in the epoch second ``s`` (kept 120 s), so the
                            completions of the last minute are one ``MGET`` of 60 keys
- ``p:stats:min:<m>``       hash: the fleet's figures of the epoch minute ``m``: outcomes,
                            dead letters, cost, retries, deferrals, an item-time histogram,
                            queue depth and each worker's busy slots (``runs/history.py``);
                            kept two hours

An item's ``<tag>`` is its run id for a default idempotency key (the item lives in its run's
slot) and the key itself for one given with ``key=``.

Nothing here reads, changes and writes back: counters move by ``HINCRBY`` inside Lua
scripts (``runs/scripts/``), so any number of workers can record outcomes of one run at once.
Every public method is ``@repeatable`` (``agentfleet.outages``): sent again after a dropped
connection, it counts nothing twice. Outcomes are counted once per item, counters once per
event id, attempts once per record, deliveries once per claim token, a run's start once per
run id. A repeat that finds its work done does nothing more: a run that the first call ended
is then left to the reconciler (its aggregate, its leaving the active runs).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from agentfleet.config import Settings
from agentfleet.models import RunSummary, TaskOutcome
from agentfleet.outages import repeatable
from agentfleet.redis_client import state_client
from agentfleet.redis_handles import StateRedis
from agentfleet.runs.aggregate_store import AggregateStore
from agentfleet.runs.claim_store import ClaimStore
from agentfleet.runs.delivery import BeginState, FinishState, outcome_kind
from agentfleet.runs.reconcile_marks import ReconcileMarks
from agentfleet.runs.run_events import RunEvents
from agentfleet.runs.spans import AttemptSpan
from agentfleet.runs.store_base import RUNS_LUA
from agentfleet.runs.summary import CompletionStats, summary_from_record
from agentfleet.runs.tally import flush_tallies

__all__ = ["RUNS_LUA", "BeginState", "FinishState", "RunStore"]

log = logging.getLogger("agentfleet.runs")


class RunStore(RunEvents, ClaimStore, AggregateStore, ReconcileMarks):
    """Run records and item outcomes in Redis (a single Redis, or a Redis Cluster). Safe to
    share between threads. Its reads of events, its claims, its aggregate and what the
    reconciler marks are parts of their own (``runs/store_base.py`` names them)."""

    @classmethod
    def from_settings(cls, settings: Settings, client: StateRedis | None = None) -> RunStore:
        return cls(
            client or state_client(settings),
            prefix=settings.key_prefix,
            ttl_s=settings.result_ttl_s,
        )

    # Runs ----------------------------------------------------------------------------------

    @repeatable
    def create_run(
        self,
        run_id: str,
        *,
        name: str,
        kind: str,
        task: str,
        items: Sequence[tuple[str, str, str]],
        inputs: Sequence[Mapping[str, Any]] = (),
        queues: Sequence[str] = (),
        aggregate: str | None = None,
        fail_fast: bool = False,
        max_in_flight: int | None = None,
        created_at: float | None = None,
        extra: Mapping[str, str | int | float] | None = None,
        dispatching_until: float | None = None,
    ) -> None:
        """Record a new run: its items (``(task_id, idempotency key, item key)`` each), their
        inputs, the queue of each stage (what a lost message is rebuilt from), ``extra`` fields.
        With ``dispatching_until`` (epoch seconds) the run is open for more items (see
        ``runs/dispatching.py``). Sent again (before any item's message is out), it writes the
        same record and counts the run as started once."""
        created = time.time() if created_at is None else created_at
        open_ = dispatching_until is not None
        # The fields every delivery reads or moves first: a small hash is a list Redis searches
        # from its head (``hash-max-ziplist-entries``), so these are found after a few entries.
        record = {
            "status": "running" if items or open_ else "finished",
            "tasks_total": len(items),
            "done": 0,
            "succeeded": 0,
            "failed": 0,
            "worker_us": 0,
            **(extra or {}),
            "name": name,
            "kind": kind,
            "task": task,
            "queues": ",".join(queues),
            "created_at": repr(created),
            "aggregate": aggregate or "",
            "fail_fast": int(fail_fast),
            "max_in_flight": max_in_flight or 0,
        }
        if open_:
            record["dispatching"] = repr(dispatching_until)
        elif not items:
            record["ended_at"] = repr(created)
        ended = not items and not open_
        self._index_run(run_id, created, active=bool(items or aggregate or open_), ended=ended)
        self._write_run(run_id, record, items, inputs)

    def _index_run(self, run_id: str, created: float, *, active: bool, ended: bool) -> None:
        # Fleet-wide first: a run in the active set with no record yet is dropped by the
        # reconciler, while a record the reconciler never hears of would never be recovered.
        shared = self._redis.pipeline(transaction=False)
        shared.zadd(self.keys.runs, {run_id: created})
        # Records expire after ttl_s; their ids go from the index as new runs arrive.
        shared.zremrangebyscore(self.keys.runs, "-inf", f"({created - self.ttl_s!r}")
        if active:
            shared.sadd(self.keys.active, run_id)
        if shared.execute()[0]:
            # Counted by the call that put the run in the index, never by one sent again.
            counts = self._redis.pipeline(transaction=False)
            counts.hincrby(self.keys.stats, "runs_started", 1)
            if ended:
                counts.hincrby(self.keys.stats, "runs_finished", 1)
            counts.execute()

    def _write_run(
        self,
        run_id: str,
        record: Mapping[str, Any],
        items: Sequence[tuple[str, str, str]],
        inputs: Sequence[Mapping[str, Any]],
    ) -> None:
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self.run_key(run_id), mapping=record)
        pipe.expire(self.run_key(run_id), self.ttl_s)
        rows_of: tuple[tuple[str, Sequence[Any]], ...] = (("items", items), ("inputs", inputs))
        for part, rows in rows_of:
            for start in range(0, len(rows), 1000):
                chunk = {str(start + i): json.dumps(row) for i, row in enumerate(rows[start : start + 1000])}
                pipe.hset(self.run_key(run_id, part), mapping=chunk)
            pipe.expire(self.run_key(run_id, part), self.ttl_s)
        pipe.execute()

    @repeatable
    def get_run(self, run_id: str) -> dict[str, str]:
        """The run's hash, or ``{}`` when there is no such run."""
        return dict(self._redis.hgetall(self.run_key(run_id)))

    @repeatable
    def items(self, run_id: str, indices: Sequence[int] | None = None) -> dict[int, tuple[str, str, str]]:
        """Item index -> ``(task_id, idempotency key, item key)``, for ``indices`` or every item."""
        key = self.run_key(run_id, "items")
        if indices is None:
            raw = self._redis.hgetall(key)
            return {int(k): tuple(json.loads(v)) for k, v in raw.items()}
        if not indices:
            return {}
        values = self._redis.hmget(key, [str(i) for i in indices])
        return {i: tuple(json.loads(v)) for i, v in zip(indices, values, strict=True) if v is not None}

    @repeatable
    def done_indices(self, run_id: str) -> set[int]:
        """The indices of the items whose outcome the run counted."""
        keys = [self.run_key(run_id, "recorded"), self.run_key(run_id, "done")]
        return {int(k) for k in self._scripts["done_indices"](keys=keys)}

    @repeatable
    def summary(self, run_id: str, *, timed_out_ids: Sequence[str] = ()) -> RunSummary:
        return summary_from_record(run_id, self.get_run(run_id), timed_out_ids=timed_out_ids)

    @repeatable
    def list_runs(self, limit: int = 20) -> list[RunSummary]:
        """The newest ``limit`` runs that still exist, newest first."""
        ids = self._redis.zrevrange(self.keys.runs, 0, max(0, limit - 1))
        pipe = self._redis.pipeline(transaction=False)
        for run_id in ids:
            pipe.hgetall(self.run_key(run_id))
        records = pipe.execute()
        summaries = []
        stale = []
        for run_id, record in zip(ids, records, strict=True):
            if record:
                summaries.append(summary_from_record(run_id, record))
            else:
                stale.append(run_id)
        if stale:
            self._redis.zrem(self.keys.runs, *stale)
        return summaries

    @repeatable
    def fail_fast(self, run_id: str) -> None:
        """Mark the run failed: deliveries that start from now on do not run, nor its aggregate."""
        self._redis.hset(self.run_key(run_id), "status", "failed")

    @repeatable
    def cancel(self, run_id: str) -> None:
        """Mark the run cancelled: deliveries that start from now on do not run."""
        self._redis.hset(self.run_key(run_id), "status", "cancelled")

    @repeatable
    def incr(self, run_id: str, field: str, amount: int = 1, *, event: str) -> bool:
        """Add ``amount`` to a run counter (``retries``, ``deferrals``...) for ``event``, an id
        of what is counted (a delivery's attempt, a recovery): an event already counted is not
        counted again. True when this call counted it."""
        keys = [self.run_key(run_id), self.run_key(run_id, "counted")]
        return bool(self._scripts["count_event"](keys=keys, args=[field, amount, event, self.ttl_s]))

    @repeatable
    def count_attempt(self, run_id: str, field: str, *, event: str, index: int, span: AttemptSpan) -> bool:
        """``incr`` of ``retries`` or ``deferrals`` by one for ``event``, noting the attempt
        (item ``index``, ``span``) on the run's timeline in the same script. True when counted."""
        counted = self._delivery.attempt(run_id, field, event=event, index=index, span=span, ttl_s=self.ttl_s)
        if counted:
            self.tally.add_count(field, at=time.time())
        return counted

    # Items ---------------------------------------------------------------------------------

    @repeatable
    def begin(
        self, run_id: str, key: str, task_id: str, *, deliveries_ttl_s: int, token: str, claim_ttl_s: float,
        preclaimed: bool = False,
    ) -> BeginState:  # fmt: skip
        """Start a delivery: read run status and any stored outcome; claim the item for
        ``claim_ttl_s`` seconds under ``token`` (``preclaimed``: a batch's, which claimed it up
        front); count the delivery once per ``token`` however often this is sent (one round trip)."""
        return self._delivery.begin(run_id, key, task_id, deliveries_ttl_s=deliveries_ttl_s, token=token,
                                    claim_ttl_s=claim_ttl_s, preclaimed=preclaimed)  # fmt: skip

    @repeatable
    def finish(
        self,
        outcome: TaskOutcome,
        *,
        store: bool = True,
        record: bool = True,
        token: str = "",
        span: AttemptSpan | None = None,
    ) -> FinishState:
        """Store an outcome under its key (first write wins), release the claim ``token``
        holds, and count the outcome once for its run; nothing while another delivery holds
        the item's claim (``FinishState.fenced``). ``span``: the worker and the time of the
        attempt that ends here, for the run's timeline."""
        state = self._delivery.finish(outcome, store=store, record=record, token=token, span=span)
        now = time.time()
        if state.recorded:
            self.tally.add_outcome(
                outcome_kind(outcome),
                dead_lettered=outcome.dead_lettered,
                cost_usd=outcome.cost_usd,
                seconds=outcome.duration_s,
                at=now,
            )
        if state.run_ended:
            self.tally.add_count("runs_finished")
            # A finished run's figures are current at once (other workers' within a second).
            with contextlib.suppress(redis.RedisError):
                self.tally.flush()
            if not state.stays_active:
                # A run with an aggregate or compensations to run stays active until they are
                # done; a worker that dies before this leaves the run to the reconciler.
                self.deactivate(outcome.run_id)
            log.info(self.summary(outcome.run_id).model_dump_json())
        return state

    # Fleet figures, deliveries, reopening -------------------------------------------------

    @repeatable
    def completion_stats(self, window_s: int = 60, *, now: float | None = None) -> CompletionStats:
        """Items counted in the last ``window_s`` seconds (at most 120), the last one's time,
        and the cumulative counters (``succeeded``, ``failed``, ``cancelled``,
        ``dead_lettered``, ``cost_usd``, ``worker_seconds``, ``runs_started``, ``runs_finished``).
        """
        window_s = max(1, min(int(window_s), 120))
        # What this process counted and has not written yet is part of the answer.
        flush_tallies()
        second = int(time.time() if now is None else now)
        buckets = self._mget([self.keys.done_bucket(second - i) for i in range(window_s)])
        raw = self._redis.hgetall(self.keys.stats)
        totals = {k: float(v) for k, v in raw.items() if k != "last_done_at"}
        last = raw.get("last_done_at")
        return CompletionStats(
            window_s=window_s,
            completed_in_window=sum(int(b) for b in buckets if b),
            last_done_at=float(last) if last else None,
            totals=totals,
        )

    @repeatable
    def clear_deliveries(self, task_id: str, key: str) -> None:
        """Forget unfinished deliveries of a task id of item ``key`` (it ended an attempt normally)."""
        self._redis.delete(self.keys.deliveries(key, task_id))

    @repeatable
    def uncount_delivery(self, task_id: str, key: str, token: str, *, mark_ttl_s: float) -> bool:
        """Take the delivery holding claim ``token`` off ``task_id``'s count of unfinished
        deliveries (item ``key``): it handed the item back, its worker did not die. Once per
        token (its mark lives ``mark_ttl_s`` seconds); True when it was taken off."""
        keys = [self.keys.deliveries(key, task_id), self.keys.deliveries(key, task_id, handed_back=token)]
        return bool(self._scripts["uncount"](keys=keys, args=[max(1, int(mark_ttl_s * 1000))]))

    @repeatable
    def reopen(
        self, run_id: str, index: int, key: str, *, was_ok: bool, was_dead: bool, input_json: str = ""
    ) -> bool:
        """Un-count an item's outcome and drop it, so a re-dispatch can record a new one.

        ``input_json`` (a stage-0 input) is kept again, for the reconciler, until the item's
        next outcome; the run becomes active again.
        """
        self._redis.sadd(self.keys.active, run_id)
        self._redis.delete(self.outcome_key(key))
        reopened = self._scripts["reopen"](
            keys=[
                self.run_key(run_id),
                self.run_key(run_id, "done"),
                self.run_key(run_id, "events"),
                self.run_key(run_id, "inputs"),
                self.run_key(run_id, "spans"),
                self.run_key(run_id, "recorded"),
            ],
            args=[index, int(was_ok), int(was_dead), input_json],
        )
        return bool(reopened)

    # An item's failed attempts ------------------------------------------------------------

    @repeatable
    def add_attempt_error(self, key: str, error: dict[str, Any]) -> bool:
        """Append one failed attempt to the item's history (the last 50 are kept). ``error``
        names its attempt and the time it was made (``AttemptRecord``), which tell it apart:
        the same record again is not appended again. True when this call appended it."""
        keys = [self.keys.item("errs", key)]
        return bool(self._scripts["attempt_error"](keys=keys, args=[json.dumps(error), self.ttl_s, 50]))
