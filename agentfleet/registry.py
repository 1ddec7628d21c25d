"""The worker registry: which live workers serve which tasks, from which queues.

Every worker writes a heartbeat when it is ready and then every ``worker.heartbeat_s``
seconds: its node name, the queues it consumes, the task modules it imported and every task
it registered (for a fleet task, its input parameters). A worker that stops writing counts
as gone ``worker.heartbeat_ttl_s`` seconds later; one that shuts down cleanly removes itself
at once. Dispatch reads it to refuse a task no live worker could run, and ``/health`` and
``/metrics`` read it instead of pinging every worker on each request.

Keys under the key prefix ``p``, hash-tagged ``{p:wk}`` so that a heartbeat's transaction and
``live``'s ``MGET`` stay on one node of a Redis Cluster:

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
from dataclasses import dataclass
from typing import Any

from agentfleet.config import Settings
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
    """One worker's last heartbeat: ``beat_at`` and ``started_at`` are epoch seconds; ``llm``
    is False when it has no LLM endpoint (a record without the field is taken to have one)."""

    node: str
    queues: tuple[str, ...]
    tasks: Mapping[str, TaskInfo]
    task_modules: tuple[str, ...] = ()
    pid: int = 0
    started_at: float = 0.0
    beat_at: float = 0.0
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
            llm=bool(raw.get("llm", True)),
        )


class WorkerRegistry:
    """Reads and writes worker heartbeats in Redis. ``ttl_s``: seconds a heartbeat lasts."""

    def __init__(self, client: StateRedis, *, prefix: str = "af", ttl_s: float = 15.0) -> None:
        self.client: Any = client
        self.prefix = prefix
        self.ttl_s = ttl_s

    @classmethod
    def from_settings(cls, settings: Settings, client: StateRedis | None = None) -> WorkerRegistry:
        return cls(
            client or state_client(settings),
            prefix=settings.key_prefix,
            ttl_s=settings.worker.heartbeat_ttl_s,
        )

    def _index_key(self) -> str:
        return f"{{{self.prefix}:wk}}:workers"

    def _record_key(self, node: str) -> str:
        return f"{{{self.prefix}:wk}}:worker:{node}"

    def beat(self, record: WorkerRecord) -> None:
        """Write ``record`` as its worker's heartbeat, good for ``ttl_s`` seconds."""
        now = time.time()
        ttl_ms = max(1, round(self.ttl_s * 1000))
        pipe = self.client.pipeline(transaction=True)
        pipe.set(self._record_key(record.node), record.to_json(), px=ttl_ms)
        pipe.zadd(self._index_key(), {record.node: now + self.ttl_s})
        pipe.zremrangebyscore(self._index_key(), "-inf", now)
        pipe.pexpire(self._index_key(), ttl_ms)
        pipe.execute()

    def remove(self, node: str) -> None:
        """Forget ``node`` at once (it is shutting down)."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self._record_key(node))
        pipe.zrem(self._index_key(), node)
        pipe.execute()

    @repeatable
    def live(self) -> list[WorkerRecord]:
        """The workers whose heartbeat has not expired, by node name.

        The records' own expiry decides (kept by Redis), not this process's clock.
        """
        nodes = self.client.zrange(self._index_key(), 0, -1)
        if not nodes:
            return []
        found = self.client.mget([self._record_key(node) for node in nodes])
        return sorted(
            (WorkerRecord.from_json(text) for text in found if text),
            key=lambda record: record.node,
        )
