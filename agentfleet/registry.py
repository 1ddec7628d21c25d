"""The worker registry: which live workers serve which tasks, from which queues.

Every worker writes a heartbeat when it is ready and then every ``worker.heartbeat_s``
seconds: its node name, the queues it consumes, the task modules it imported, every task
it registered (for a fleet task, its input parameters) and the rate limits it applies
(``agentfleet limits show`` reads them); and, for the console's workers page, its host, pool,
slots and busy slots, memory and agentfleet version. A record from an older worker lacks
those: they read as unknown (empty, or None). A worker that stops writing counts
as gone ``worker.heartbeat_ttl_s`` seconds later; one that shuts down cleanly removes itself
at once. Dispatch reads it to refuse a task no live worker could run, and ``/health`` and
``/metrics`` read it instead of pinging every worker on each request.

Keys under the key prefix ``p`` (names from ``agentfleet.keys``), hash-tagged ``{p:wk}`` so that
a heartbeat's transaction and ``live``'s ``MGET`` stay on one node of a Redis Cluster:

- ``{p:wk}:worker:<node>``  string, the worker's record as JSON; expires ``heartbeat_ttl_s``
                            after its last heartbeat
- ``{p:wk}:workers``        sorted set: node name -> epoch seconds its record expires (the
                            index that lists records without a ``SCAN``); pruned of expired
                            members on every heartbeat, and expires ``heartbeat_ttl_s`` after
                            the last one
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentfleet.config import Settings
from agentfleet.keys import WorkerKeys
from agentfleet.outages import repeatable
from agentfleet.redis_client import state_client
from agentfleet.redis_handles import StateRedis

__all__ = ["TaskInfo", "WorkerRecord", "WorkerRegistry"]


@dataclass(frozen=True)
class TaskInfo:
    """A task as a worker registered it. ``fleet`` is False for a plain Celery task; a fleet
    task's ``params`` are its input's names, ``required`` those without a default."""

    fleet: bool = False
    params: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    llm: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "fleet": self.fleet,
            "params": list(self.params),
            "required": list(self.required),
            "llm": self.llm,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> TaskInfo:
        return cls(
            fleet=bool(raw.get("fleet")),
            params=tuple(raw.get("params") or ()),
            required=tuple(raw.get("required") or ()),
            llm=bool(raw.get("llm")),
        )


@dataclass(frozen=True)
class WorkerRecord:
    """One worker's last heartbeat: ``beat_at`` and ``started_at`` are epoch seconds.

    ``pool`` is Celery's pool (``prefork``, ``threads``, ``gevent``, ``solo``...), ``slots``
    how many tasks it runs at once and ``busy`` how many it was running at the heartbeat;
    ``rss_bytes`` the resident memory of the worker and its pool processes, in bytes.

    ``limits`` is the limiter configuration the worker applies, as plain data: ``table``
    (downstream -> the ``LimitSpec`` fields set), ``default`` (the same, for any other
    downstream) and ``max_parallelism`` (None: no fleet ceiling); empty from a worker too old
    to say.

    ``llm`` is False when the worker has no LLM endpoint (a record without the field is taken
    to have one).
    """

    node: str
    queues: tuple[str, ...]
    tasks: Mapping[str, TaskInfo]
    task_modules: tuple[str, ...] = ()
    pid: int = 0
    started_at: float = 0.0
    beat_at: float = 0.0
    host: str = ""
    pool: str = ""
    slots: int | None = None
    busy: int | None = None
    rss_bytes: int | None = None
    version: str = ""
    limits: Mapping[str, Any] = field(default_factory=dict)
    llm: bool = True

    def to_json(self) -> str:
        return json.dumps(
            {
                "node": self.node,
                "queues": list(self.queues),
                "tasks": {name: info.as_dict() for name, info in self.tasks.items()},
                "task_modules": list(self.task_modules),
                "pid": self.pid,
                "started_at": self.started_at,
                "beat_at": self.beat_at,
                "host": self.host,
                "pool": self.pool,
                "slots": self.slots,
                "busy": self.busy,
                "rss_bytes": self.rss_bytes,
                "version": self.version,
                "limits": dict(self.limits),
                "llm": self.llm,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> WorkerRecord:
        raw = json.loads(text)
        return cls(
            node=str(raw["node"]),
            queues=tuple(raw.get("queues") or ()),
            tasks={name: TaskInfo.from_dict(info) for name, info in (raw.get("tasks") or {}).items()},
            task_modules=tuple(raw.get("task_modules") or ()),
            pid=int(raw.get("pid") or 0),
            started_at=float(raw.get("started_at") or 0.0),
            beat_at=float(raw.get("beat_at") or 0.0),
            host=str(raw.get("host") or ""),
            pool=str(raw.get("pool") or ""),
            slots=_count(raw.get("slots")),
            busy=_count(raw.get("busy")),
            rss_bytes=_count(raw.get("rss_bytes")),
            version=str(raw.get("version") or ""),
            limits=dict(raw.get("limits") or {}),
            llm=bool(raw.get("llm", True)),
        )


def _count(value: Any) -> int | None:
    """A whole number from a record, or None when it is missing or not one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


class WorkerRegistry:
    """Reads and writes worker heartbeats in Redis. ``ttl_s``: seconds a heartbeat lasts."""

    def __init__(self, client: StateRedis, *, prefix: str = "af", ttl_s: float = 15.0) -> None:
        self.client: Any = client
        self.keys = WorkerKeys(prefix)
        self.ttl_s = ttl_s

    @classmethod
    def from_settings(cls, settings: Settings, client: StateRedis | None = None) -> WorkerRegistry:
        return cls(
            client or state_client(settings),
            prefix=settings.key_prefix,
            ttl_s=settings.worker.heartbeat_ttl_s,
        )

    def beat(self, record: WorkerRecord) -> None:
        """Write ``record`` as its worker's heartbeat, good for ``ttl_s`` seconds."""
        now = time.time()
        ttl_ms = max(1, round(self.ttl_s * 1000))
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self.keys.record(record.node), record.to_json(), px=ttl_ms)
        pipe.zadd(self.keys.index, {record.node: now + self.ttl_s})
        pipe.zremrangebyscore(self.keys.index, "-inf", now)
        pipe.pexpire(self.keys.index, ttl_ms)
        pipe.execute()

    def remove(self, node: str) -> None:
        """Forget ``node`` at once (it is shutting down)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.keys.record(node))
        pipe.zrem(self.keys.index, node)
        pipe.execute()

    @repeatable
    def live(self) -> list[WorkerRecord]:
        """The workers whose heartbeat has not expired, by node name.

        The records' own expiry decides (kept by Redis), not this process's clock.
        """
        nodes = self.client.zrange(self.keys.index, 0, -1)
        if not nodes:
            return []
        found = self.client.mget([self.keys.record(node) for node in nodes])
        return sorted(
            (WorkerRecord.from_json(text) for text in found if text),
            key=lambda record: record.node,
        )
