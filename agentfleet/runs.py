"""The run store: run records, one key per item outcome, counters by ``HINCRBY``.

Layout under the key prefix ``p`` (every key expires after ``ttl_s`` seconds):

- ``p:run:{id}``          hash: name, kind, totals, status, times and the counters
- ``p:run:{id}:items``    hash: item index -> ``[task_id, idempotency key, item key]``
- ``p:run:{id}:done``     hash: item index -> 1, the guard that counts each item once
- ``p:run:{id}:events``   stream: each outcome in completion order, then ``end``; ``reopen``
  when a dead-lettered item is requeued (its next outcome follows)
- ``p:out:{key}``         an item's stored outcome, under its idempotency key
- ``p:errs:{key}``        list: every failed attempt of an item (type, message, time)
- ``p:deliv:{task_id}``   deliveries of a task id that have not finished (poison detection)
- ``p:runs``              sorted set: run ids by creation time
- ``p:stats``             hash: fleet-wide counters since the first run (items by outcome,
                          dead letters, cost in US dollars, worker seconds, runs started and
                          finished) and ``last_done_at``, the epoch seconds of the last item
                          counted; never expires
- ``p:stats:done:{s}``    items counted in the epoch second ``s`` (kept 120 s), so the
                          completions of the last minute are one ``MGET`` of 60 keys

Nothing here reads, changes and writes back: counters move by ``HINCRBY`` inside Lua
scripts, so any number of workers can record outcomes of one run at once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from agentfleet.config import Settings
from agentfleet.models import RunSummary, TaskOutcome
from agentfleet.redis_client import connect

__all__ = ["BeginState", "CompletionStats", "FinishState", "RunStore", "summary_from_record"]

log = logging.getLogger("agentfleet.runs")

_BEGIN = """
local status = redis.call('HGET', KEYS[1], 'status')
local stored = redis.call('GET', KEYS[2])
local n = 0
if (not stored) and status ~= 'cancelled' and status ~= 'failed' then
  n = redis.call('INCR', KEYS[3])
  redis.call('EXPIRE', KEYS[3], ARGV[1])
end
return {status or '', stored or '', n}
"""

_FINISH = """
local run, done, events, outkey, deliv = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local idx, body, kind, dead = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local cost, secs, ttl, store, record, now = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local stats, bucket = KEYS[6], KEYS[7]
redis.call('DEL', deliv)
if store == '1' then
  local ok = redis.call('SET', outkey, body, 'EX', ttl, 'NX')
  if not ok then body = redis.call('GET', outkey) or body end
end
if record ~= '1' or redis.call('EXISTS', run) == 0 then return {0, 0, 0, 0} end
if redis.call('HSETNX', done, idx, '1') == 0 then return {0, 0, 0, 0} end
redis.call('XADD', events, '*', 'kind', 'outcome', 'idx', idx, 'outcome', body)
local n = redis.call('HINCRBY', run, 'done', 1)
redis.call('HINCRBY', run, kind, 1)
if dead == '1' then redis.call('HINCRBY', run, 'dead_lettered', 1) end
redis.call('HINCRBYFLOAT', run, 'cost_usd', cost)
redis.call('HINCRBYFLOAT', run, 'worker_seconds', secs)
redis.call('EXPIRE', done, ttl)
redis.call('EXPIRE', events, ttl)
redis.call('HINCRBY', stats, kind, 1)
if dead == '1' then redis.call('HINCRBY', stats, 'dead_lettered', 1) end
redis.call('HINCRBYFLOAT', stats, 'cost_usd', cost)
redis.call('HINCRBYFLOAT', stats, 'worker_seconds', secs)
redis.call('HSET', stats, 'last_done_at', now)
redis.call('INCR', bucket)
redis.call('EXPIRE', bucket, 120)
local total = tonumber(redis.call('HGET', run, 'tasks_total') or '0')
if n >= total then
  redis.call('HSETNX', run, 'ended_at', now)
  if redis.call('HGET', run, 'status') == 'running' then redis.call('HSET', run, 'status', 'finished') end
  redis.call('XADD', events, '*', 'kind', 'end')
  redis.call('HINCRBY', stats, 'runs_finished', 1)
  return {1, n, total, 1}
end
return {1, n, total, 0}
"""

_REOPEN = """
local run, done, outkey, events = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local idx, was_ok, was_dead = ARGV[1], ARGV[2], ARGV[3]
redis.call('DEL', outkey)
if redis.call('HDEL', done, idx) == 0 then return 0 end
redis.call('XADD', events, '*', 'kind', 'reopen', 'idx', idx)
redis.call('HINCRBY', run, 'done', -1)
if was_ok == '1' then redis.call('HINCRBY', run, 'succeeded', -1)
else redis.call('HINCRBY', run, 'failed', -1) end
if was_dead == '1' then redis.call('HINCRBY', run, 'dead_lettered', -1) end
redis.call('HINCRBY', run, 'redelivered', 1)
redis.call('HDEL', run, 'ended_at')
if redis.call('HGET', run, 'status') == 'finished' then redis.call('HSET', run, 'status', 'running') end
return 1
"""


@dataclass(frozen=True)
class BeginState:
    """What a delivery finds when it starts: run status, a stored outcome, its delivery count."""

    status: str
    stored: TaskOutcome | None
    deliveries: int

    @property
    def cancelled(self) -> bool:
        """True when the run was cancelled, or failed fast: this delivery must not run."""
        return self.status in ("cancelled", "failed")


@dataclass(frozen=True)
class FinishState:
    """Whether an outcome was counted for its run, the run's progress, and if it just ended."""

    recorded: bool
    done: int
    total: int
    run_ended: bool


@dataclass(frozen=True)
class CompletionStats:
    """Fleet-wide progress: items counted in the last ``window_s`` seconds, the epoch seconds of
    the last one (None if none ever), and the cumulative counters of ``p:stats``.

    Times come from the clocks of the workers that recorded the items.
    """

    window_s: int
    completed_in_window: int
    last_done_at: float | None
    totals: dict[str, float]


def _num(record: dict[str, str], field: str, kind: type = int) -> Any:
    raw = record.get(field)
    if raw in (None, ""):
        return kind(0)
    return kind(float(raw)) if kind is int else kind(raw)


def summary_from_record(
    run_id: str, record: dict[str, str], *, timed_out_ids: Sequence[str] = (), now: float | None = None
) -> RunSummary:
    """A ``RunSummary`` from a run hash. ``wall_clock_s`` stops at ``ended_at`` if set."""
    total = _num(record, "tasks_total")
    succeeded = _num(record, "succeeded")
    created = _num(record, "created_at", float)
    ended_raw = record.get("ended_at")
    ended = float(ended_raw) if ended_raw else None
    end = ended if ended is not None else (time.time() if now is None else now)
    return RunSummary(
        run_id=run_id,
        name=record.get("name", ""),
        tasks_total=total,
        succeeded=succeeded,
        failed=_num(record, "failed"),
        dead_lettered=_num(record, "dead_lettered"),
        cancelled=_num(record, "cancelled"),
        redelivered=_num(record, "redelivered"),
        retries=_num(record, "retries"),
        deferrals=_num(record, "deferrals"),
        timed_out=len(timed_out_ids),
        timed_out_ids=list(timed_out_ids),
        wall_clock_s=round(max(0.0, end - created), 3) if created else 0.0,
        worker_seconds=round(_num(record, "worker_seconds", float), 3),
        cost_usd=round(_num(record, "cost_usd", float), 6),
        success_rate=round(succeeded / total, 4) if total else 1.0,
        status=record.get("status", "unknown"),
        created_at=created,
        ended_at=ended,
    )


class RunStore:
    """Run records and item outcomes in Redis. Safe to share between threads."""

    def __init__(self, client: redis.Redis, *, prefix: str = "af", ttl_s: int = 7 * 86400) -> None:
        # redis-py's reply types are unions of every RESP shape; this store knows each reply.
        self.client: Any = client
        self.prefix = prefix
        self.ttl_s = ttl_s
        self._begin = client.register_script(_BEGIN)
        self._finish = client.register_script(_FINISH)
        self._reopen = client.register_script(_REOPEN)

    @classmethod
    def from_settings(cls, settings: Settings, client: redis.Redis | None = None) -> RunStore:
        return cls(
            client or connect(settings.broker_url),
            prefix=settings.key_prefix,
            ttl_s=settings.result_ttl_s,
        )

    # Keys ----------------------------------------------------------------------------------

    def run_key(self, run_id: str, part: str = "") -> str:
        return f"{self.prefix}:run:{run_id}" + (f":{part}" if part else "")

    def outcome_key(self, key: str) -> str:
        return f"{self.prefix}:out:{key}"

    def _errors_key(self, key: str) -> str:
        return f"{self.prefix}:errs:{key}"

    def _deliveries_key(self, task_id: str) -> str:
        return f"{self.prefix}:deliv:{task_id}"

    def _stats_key(self) -> str:
        return f"{self.prefix}:stats"

    def _done_bucket_key(self, second: int) -> str:
        return f"{self.prefix}:stats:done:{second}"

    # Runs ----------------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        name: str,
        kind: str,
        task: str,
        items: Sequence[tuple[str, str, str]],
        aggregate: str | None = None,
        fail_fast: bool = False,
        created_at: float | None = None,
    ) -> None:
        """Record a new run and its items: ``(task_id, idempotency key, item key)`` each."""
        created = time.time() if created_at is None else created_at
        record = {
            "name": name,
            "kind": kind,
            "task": task,
            "tasks_total": len(items),
            "status": "running" if items else "finished",
            "created_at": repr(created),
            "aggregate": aggregate or "",
            "fail_fast": int(fail_fast),
            "done": 0,
            "succeeded": 0,
            "failed": 0,
        }
        if not items:
            record["ended_at"] = repr(created)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.run_key(run_id), mapping=record)
        pipe.expire(self.run_key(run_id), self.ttl_s)
        for start in range(0, len(items), 1000):
            chunk = {str(start + i): json.dumps(item) for i, item in enumerate(items[start : start + 1000])}
            pipe.hset(self.run_key(run_id, "items"), mapping=chunk)
        pipe.expire(self.run_key(run_id, "items"), self.ttl_s)
        pipe.zadd(f"{self.prefix}:runs", {run_id: created})
        pipe.hincrby(self._stats_key(), "runs_started", 1)
        if not items:
            pipe.hincrby(self._stats_key(), "runs_finished", 1)
        pipe.execute()

    def get_run(self, run_id: str) -> dict[str, str]:
        """The run's hash, or ``{}`` when there is no such run."""
        return dict(self.client.hgetall(self.run_key(run_id)))

    def items(self, run_id: str) -> dict[int, tuple[str, str, str]]:
        """Item index -> ``(task_id, idempotency key, item key)``."""
        raw = self.client.hgetall(self.run_key(run_id, "items"))
        return {int(k): tuple(json.loads(v)) for k, v in raw.items()}

    def done_indices(self, run_id: str) -> set[int]:
        return {int(k) for k in self.client.hkeys(self.run_key(run_id, "done"))}

    def summary(self, run_id: str, *, timed_out_ids: Sequence[str] = ()) -> RunSummary:
        return summary_from_record(run_id, self.get_run(run_id), timed_out_ids=timed_out_ids)

    def list_runs(self, limit: int = 20) -> list[RunSummary]:
        """The newest ``limit`` runs that still exist, newest first."""
        ids = self.client.zrevrange(f"{self.prefix}:runs", 0, max(0, limit - 1))
        pipe = self.client.pipeline(transaction=False)
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
            self.client.zrem(f"{self.prefix}:runs", *stale)
        return summaries

    def add_spend(self, run_id: str, usd: float) -> float:
        """Add US dollars spent by an item still running; the run's live spend after it."""
        return float(self.client.hincrbyfloat(self.run_key(run_id), "spent_usd", usd))

    def spent(self, run_id: str) -> float:
        """US dollars the run's items have spent so far, finished or not."""
        return float(self.client.hget(self.run_key(run_id), "spent_usd") or 0.0)

    def fail_fast(self, run_id: str) -> None:
        """Mark the run failed: deliveries that start from now on do not run, nor its aggregate."""
        self.client.hset(self.run_key(run_id), "status", "failed")

    def cancel(self, run_id: str) -> None:
        """Mark the run cancelled: deliveries that start from now on do not run."""
        self.client.hset(self.run_key(run_id), "status", "cancelled")

    def incr(self, run_id: str, field: str, amount: int = 1) -> None:
        """Add ``amount`` to a run counter (``retries``, ``deferrals``...)."""
        self.client.hincrby(self.run_key(run_id), field, amount)

    def events(
        self, run_id: str, last_id: str = "0-0", *, block_ms: int | None = None, count: int = 500
    ) -> list[tuple[str, dict[str, str]]]:
        """Events after ``last_id`` (``outcome`` or ``end``), waiting up to ``block_ms`` ms."""
        reply = self.client.xread({self.run_key(run_id, "events"): last_id}, count=count, block=block_ms)
        if not reply:
            return []
        return [(entry_id, fields) for entry_id, fields in reply[0][1]]

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

    def mark_aggregate_started(self, run_id: str, at: float | None = None) -> None:
        """Note when the fan-in callback started (seconds since the epoch)."""
        self.client.hset(
            self.run_key(run_id), "aggregate_started_at", repr(time.time() if at is None else at)
        )

    def set_aggregate(self, run_id: str, *, ok: bool, value: Any = None, error: str = "") -> None:
        body = json.dumps({"ok": ok, "value": value, "error": error})
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(self.run_key(run_id), "aggregate_result", body)
        pipe.xadd(self.run_key(run_id, "events"), {"kind": "aggregate"})
        pipe.execute()

    def get_aggregate(self, run_id: str) -> dict[str, Any] | None:
        raw = self.client.hget(self.run_key(run_id), "aggregate_result")
        return json.loads(raw) if raw else None

    # Items ---------------------------------------------------------------------------------

    def begin(self, run_id: str, key: str, task_id: str, *, deliveries_ttl_s: int) -> BeginState:
        """Start a delivery: read run status and any stored outcome; count the delivery."""
        status, stored, deliveries = self._begin(
            keys=[self.run_key(run_id), self.outcome_key(key), self._deliveries_key(task_id)],
            args=[deliveries_ttl_s],
        )
        outcome = TaskOutcome.model_validate_json(stored) if stored else None
        return BeginState(status=str(status), stored=outcome, deliveries=int(deliveries))

    def finish(self, outcome: TaskOutcome, *, store: bool = True, record: bool = True) -> FinishState:
        """Store an outcome under its key (first write wins) and count it once for its run."""
        if outcome.ok:
            kind = "succeeded"
        elif outcome.error_type == "Cancelled":
            kind = "cancelled"
        else:
            kind = "failed"
        now = time.time()
        recorded, done, total, ended = self._finish(
            keys=[
                self.run_key(outcome.run_id),
                self.run_key(outcome.run_id, "done"),
                self.run_key(outcome.run_id, "events"),
                self.outcome_key(outcome.idempotency_key),
                self._deliveries_key(outcome.task_id),
                self._stats_key(),
                self._done_bucket_key(int(now)),
            ],
            args=[
                outcome.index,
                outcome.model_dump_json(),
                kind,
                int(outcome.dead_lettered),
                repr(outcome.cost_usd),
                repr(outcome.duration_s),
                self.ttl_s,
                int(store),
                int(record),
                repr(now),
            ],
        )
        state = FinishState(bool(recorded), int(done), int(total), bool(ended))
        if state.run_ended:
            log.info(self.summary(outcome.run_id).model_dump_json())
        return state

    def completion_stats(self, window_s: int = 60, *, now: float | None = None) -> CompletionStats:
        """Items counted in the last ``window_s`` seconds (at most 120), the last one's time,
        and the cumulative counters (``succeeded``, ``failed``, ``cancelled``,
        ``dead_lettered``, ``cost_usd``, ``worker_seconds``, ``runs_started``, ``runs_finished``).
        """
        window_s = max(1, min(int(window_s), 120))
        second = int(time.time() if now is None else now)
        keys = [self._done_bucket_key(second - i) for i in range(window_s)]
        pipe = self.client.pipeline(transaction=False)
        pipe.mget(keys)
        pipe.hgetall(self._stats_key())
        buckets, raw = pipe.execute()
        totals = {k: float(v) for k, v in raw.items() if k != "last_done_at"}
        last = raw.get("last_done_at")
        return CompletionStats(
            window_s=window_s,
            completed_in_window=sum(int(b) for b in buckets if b),
            last_done_at=float(last) if last else None,
            totals=totals,
        )

    def clear_deliveries(self, task_id: str) -> None:
        """Forget unfinished deliveries of a task id (it ended an attempt normally)."""
        self.client.delete(self._deliveries_key(task_id))

    def reopen(self, run_id: str, index: int, key: str, *, was_ok: bool, was_dead: bool) -> bool:
        """Un-count an item's outcome and drop it, so a re-dispatch can record a new one."""
        return bool(
            self._reopen(
                keys=[
                    self.run_key(run_id),
                    self.run_key(run_id, "done"),
                    self.outcome_key(key),
                    self.run_key(run_id, "events"),
                ],
                args=[index, int(was_ok), int(was_dead)],
            )
        )

    def add_attempt_error(self, key: str, error: dict[str, Any]) -> None:
        """Append one failed attempt (type, message, time...) to the item's history."""
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(self._errors_key(key), json.dumps(error))
        pipe.ltrim(self._errors_key(key), -50, -1)
        pipe.expire(self._errors_key(key), self.ttl_s)
        pipe.execute()

    def attempt_errors(self, key: str) -> list[dict[str, Any]]:
        return [json.loads(x) for x in self.client.lrange(self._errors_key(key), 0, -1)]

    def stored_outcomes(self, keys: Iterable[str]) -> list[TaskOutcome | None]:
        keys = list(keys)
        if not keys:
            return []
        raw = self.client.mget([self.outcome_key(k) for k in keys])
        return [TaskOutcome.model_validate_json(r) if r else None for r in raw]
