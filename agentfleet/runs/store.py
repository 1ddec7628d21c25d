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
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import redis

from agentfleet.config import Settings
from agentfleet.keys import RunKeys
from agentfleet.lua import ScriptSet
from agentfleet.models import RunSummary, TaskOutcome
from agentfleet.outages import repeatable
from agentfleet.redis_client import state_client
from agentfleet.redis_handles import StateRedis
from agentfleet.runs.delivery import BeginState, DeliveryScripts, FinishState, outcome_kind
from agentfleet.runs.spans import AttemptSpan, SpanLog, parse_spans
from agentfleet.runs.summary import CompletionStats, summary_from_record
from agentfleet.runs.tally import StatsTally, flush_tallies

__all__ = ["RUNS_LUA", "BeginState", "FinishState", "RunStore"]

RUNS_LUA = ScriptSet("agentfleet.runs", "scripts")

log = logging.getLogger("agentfleet.runs")


class RunStore:
    """Run records and item outcomes in Redis (a single Redis, or a Redis Cluster). Safe to
    share between threads."""

    def __init__(self, client: StateRedis, *, prefix: str = "af", ttl_s: int = 7 * 86400) -> None:
        # The handle, for what shares this Redis; commands go through ``_redis``: redis-py's
        # reply types are unions of every RESP shape, and this store knows each reply.
        self.client = client
        self._redis: Any = client
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.keys = RunKeys(prefix)
        self.clustered = isinstance(client, redis.RedisCluster)
        self._scripts = RUNS_LUA.register(
            client, "reopen", "release", "renew", "count_event", "attempt_error"
        )
        self._delivery = DeliveryScripts(client, self.keys, ttl_s=ttl_s, clustered=self.clustered)
        self.tally = StatsTally(client, self.keys.stats, self.keys.done_bucket, minute_key=self.keys.minute)

    @classmethod
    def from_settings(cls, settings: Settings, client: StateRedis | None = None) -> RunStore:
        return cls(
            client or state_client(settings),
            prefix=settings.key_prefix,
            ttl_s=settings.result_ttl_s,
        )

    # Keys ----------------------------------------------------------------------------------

    @repeatable
    def run_key(self, run_id: str, part: str = "") -> str:
        return self.keys.run(run_id, part)

    @repeatable
    def outcome_key(self, key: str) -> str:
        return self.keys.item("out", key)

    @repeatable
    def claim_key(self, key: str) -> str:
        return self.keys.item("claim", key)

    @repeatable
    def active_key(self) -> str:
        return self.keys.active

    def _mget(self, keys: Sequence[str]) -> list[Any]:
        # A cluster answers one slot per command: its client splits the read by slot.
        return list(self._redis.mget_nonatomic(keys) if self.clustered else self._redis.mget(keys))

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
        record = {
            **(extra or {}),
            "name": name,
            "kind": kind,
            "task": task,
            "queues": ",".join(queues),
            "tasks_total": len(items),
            "status": "running" if items or open_ else "finished",
            "created_at": repr(created),
            "aggregate": aggregate or "",
            "fail_fast": int(fail_fast),
            "max_in_flight": max_in_flight or 0,
            "done": 0,
            "succeeded": 0,
            "failed": 0,
        }
        if open_:
            record["dispatching"] = repr(dispatching_until)
        elif not items:
            record["ended_at"] = repr(created)
        # Fleet-wide first: a run in the active set with no record yet is dropped by the
        # reconciler, while a record the reconciler never hears of would never be recovered.
        shared = self._redis.pipeline(transaction=False)
        shared.zadd(self.keys.runs, {run_id: created})
        # Records expire after ttl_s; their ids go from the index as new runs arrive.
        shared.zremrangebyscore(self.keys.runs, "-inf", f"({created - self.ttl_s!r}")
        if items or aggregate or open_:
            shared.sadd(self.keys.active, run_id)
        if shared.execute()[0]:
            # Counted by the call that put the run in the index, never by one sent again.
            counts = self._redis.pipeline(transaction=False)
            counts.hincrby(self.keys.stats, "runs_started", 1)
            if not items and not open_:
                counts.hincrby(self.keys.stats, "runs_finished", 1)
            counts.execute()
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self.run_key(run_id), mapping=record)
        pipe.expire(self.run_key(run_id), self.ttl_s)
        for part, rows in (("items", items), ("inputs", inputs)):
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
        return {int(k) for k in self._redis.hkeys(self.run_key(run_id, "done"))}

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

    @repeatable
    def spans(self, run_id: str, *, after: SpanLog | None = None) -> SpanLog:
        """The run's timeline (``runs/spans.py``): empty for a run recorded before it was kept.
        Given ``after`` (an earlier read), only the entries written since are read."""
        start = after.entries if after is not None else 0
        pipe = self._redis.pipeline(transaction=False)
        pipe.llen(self.run_key(run_id, "spans"))
        pipe.lrange(self.run_key(run_id, "spans"), start, -1)
        pipe.hgetall(self.run_key(run_id, "lanes"))
        length, entries, lanes = pipe.execute()
        if int(length) < start:
            # The list is not the one read before (it expired): read it whole.
            return self.spans(run_id)
        return parse_spans(entries, lanes, after=after)

    @repeatable
    def attempt_errors_of(self, keys: Sequence[str]) -> list[list[dict[str, Any]]]:
        """``attempt_errors`` of each item key, in one round trip."""
        pipe = self._redis.pipeline(transaction=False)
        for key in keys:
            pipe.lrange(self.keys.item("errs", key), 0, -1)
        return [[json.loads(x) for x in found] for found in pipe.execute()] if keys else []

    @repeatable
    def events_at(self, run_id: str, ids: Sequence[str]) -> dict[str, dict[str, str]]:
        """The run's events with these stream ids (one ``XRANGE`` each, in one round trip)."""
        if not ids:
            return {}
        key = self.run_key(run_id, "events")
        pipe = self._redis.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(key, entry_id, entry_id)
        found: dict[str, dict[str, str]] = {}
        for reply in pipe.execute():
            for entry_id, fields in reply:
                found[entry_id] = fields
        return found

    @repeatable
    def events(
        self, run_id: str, last_id: str = "0-0", *, block_ms: int | None = None, count: int = 500
    ) -> list[tuple[str, dict[str, str]]]:
        """Events after ``last_id`` (``outcome`` or ``end``), waiting up to ``block_ms`` ms."""
        reply = self._redis.xread({self.run_key(run_id, "events"): last_id}, count=count, block=block_ms)
        if not reply:
            return []
        return [(entry_id, fields) for entry_id, fields in reply[0][1]]

    @repeatable
    def outcomes(self, run_id: str) -> dict[int, TaskOutcome]:
        """The latest outcome of each finished item, by index."""
        found: dict[int, TaskOutcome] = {}
        last = "0-0"
        while True:
            batch = self.events(run_id, last, count=2000)
            if not batch:
                return found
            for entry_id, fields in batch:
                last = entry_id
                if fields.get("kind") == "outcome":
                    found[int(fields["idx"])] = TaskOutcome.model_validate_json(fields["outcome"])

    # Aggregates ----------------------------------------------------------------------------

    @repeatable
    def mark_aggregate_started(self, run_id: str, at: float | None = None) -> None:
        """Note when the fan-in callback started (seconds since the epoch)."""
        self._redis.hset(
            self.run_key(run_id), "aggregate_started_at", repr(time.time() if at is None else at)
        )

    @repeatable
    def set_aggregate(self, run_id: str, *, ok: bool, value: Any = None, error: str = "") -> bool:
        """Store the aggregate's result (the first one stored wins); the run is then done. Sent
        again, it stores nothing more and adds a second ``aggregate`` event (readers take any
        as the signal to read the result)."""
        body = json.dumps({"ok": ok, "value": value, "error": error})
        pipe = self._redis.pipeline(transaction=True)
        pipe.hsetnx(self.run_key(run_id), "aggregate_result", body)
        pipe.xadd(self.run_key(run_id, "events"), {"kind": "aggregate"})
        stored, _ = pipe.execute()
        self.deactivate(run_id)
        return bool(stored)

    @repeatable
    def reopen_aggregate(self, run_id: str) -> None:
        """Forget a failed aggregate (its result and deliveries) so it runs again; the run is
        active again until it is stored."""
        pipe = self._redis.pipeline(transaction=False)
        pipe.hdel(self.run_key(run_id), "aggregate_result", "aggregate_attempts", "aggregate_started_at")
        pipe.sadd(self.keys.active, run_id)
        pipe.execute()

    @repeatable
    def get_aggregate(self, run_id: str) -> dict[str, Any] | None:
        raw = self._redis.hget(self.run_key(run_id), "aggregate_result")
        return json.loads(raw) if raw else None

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

    # Claims --------------------------------------------------------------------------------

    @repeatable
    def release_claim(self, key: str, token: str) -> bool:
        """Give up the claim on ``key`` if ``token`` holds it."""
        return bool(self._scripts["release"](keys=[self.claim_key(key)], args=[token, "exact"]))

    @repeatable
    def release_claim_of(self, key: str, owner_prefix: str) -> bool:
        """Give up the claim on ``key`` if a token starting with ``owner_prefix`` holds it (the
        worker's main process releasing the claim of a pool process that died)."""
        return bool(self._scripts["release"](keys=[self.claim_key(key)], args=[owner_prefix, "prefix"]))

    @repeatable
    def renew_claims(self, held: Mapping[str, str], ttl_s: float) -> dict[str, bool]:
        """Extend each claim ``key -> token`` still held; which ones were (True) or were lost."""
        if not held:
            return {}
        groups: dict[int, list[str]] = {}
        for key in held:
            # One script per cluster slot (one for all on a single Redis).
            slot = self._redis.keyslot(self.claim_key(key)) if self.clustered else 0
            groups.setdefault(slot, []).append(key)
        kept: dict[str, bool] = {}
        for keys in groups.values():
            reply = self._scripts["renew"](
                keys=[self.claim_key(k) for k in keys],
                args=[max(1, int(ttl_s * 1000)), *[held[k] for k in keys]],
            )
            kept.update((k, bool(v)) for k, v in zip(keys, reply, strict=True))
        return kept

    @repeatable
    def live_claims(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key has a live claim now."""
        if not keys:
            return []
        return [v is not None for v in self._mget([self.claim_key(k) for k in keys])]

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
            ],
            args=[index, int(was_ok), int(was_dead), input_json],
        )
        return bool(reopened)

    # What the reconciler reads and marks ---------------------------------------------------

    @repeatable
    def active_runs(self) -> list[str]:
        """Runs that are running or waiting for their aggregate."""
        return sorted(self._redis.smembers(self.keys.active))

    @repeatable
    def deactivate(self, run_id: str) -> None:
        """The run needs no more reconciling (it ended, or its record expired)."""
        self._redis.srem(self.keys.active, run_id)

    @repeatable
    def item_inputs(self, run_id: str, indices: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The stage-0 inputs still kept for ``indices`` (an item's is dropped at its outcome)."""
        if not indices:
            return {}
        raw = self._redis.hmget(self.run_key(run_id, "inputs"), [str(i) for i in indices])
        return {i: json.loads(r) for i, r in zip(indices, raw, strict=True) if r is not None}

    @repeatable
    def suspects(self, run_id: str) -> dict[str, float]:
        """Items (by index) or run-level messages (by name) found with no outcome, claim or
        message, and since when (epoch seconds)."""
        return {str(k): float(v) for k, v in self._redis.hgetall(self.run_key(run_id, "suspect")).items()}

    @repeatable
    def mark_suspects(self, run_id: str, first_seen: Mapping[str, float], cleared: Iterable[str]) -> None:
        """Note newly suspect items (first sighting kept) and forget ones seen alive again."""
        key = self.run_key(run_id, "suspect")
        gone = [str(i) for i in cleared]
        pipe = self._redis.pipeline(transaction=False)
        if gone:
            pipe.hdel(key, *gone)
        for idx, at in first_seen.items():
            pipe.hsetnx(key, str(idx), repr(at))
        pipe.expire(key, self.ttl_s)
        pipe.execute()

    @repeatable
    def add_attempt_error(self, key: str, error: dict[str, Any]) -> bool:
        """Append one failed attempt to the item's history (the last 50 are kept). ``error``
        names its attempt and the time it was made (``AttemptRecord``), which tell it apart:
        the same record again is not appended again. True when this call appended it."""
        keys = [self.keys.item("errs", key)]
        return bool(self._scripts["attempt_error"](keys=keys, args=[json.dumps(error), self.ttl_s, 50]))

    @repeatable
    def attempt_errors(self, key: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self._redis.lrange(self.keys.item("errs", key), 0, -1)]

    @repeatable
    def stored_outcomes(self, keys: Iterable[str]) -> list[TaskOutcome | None]:
        keys = list(keys)
        if not keys:
            return []
        raw = self._mget([self.outcome_key(k) for k in keys])
        return [TaskOutcome.model_validate_json(r) if r else None for r in raw]
