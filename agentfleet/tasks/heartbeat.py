"""The worker's heartbeat: what it serves, written to the registry while it runs.

Started by the ``worker_ready`` signal in the worker's main process: one record at once (so
dispatch admits work for its tasks as soon as it is ready), then one every
``worker.heartbeat_s`` seconds from a daemon thread. Each record carries the worker's load
(``worker_load``); each beat also notes the fleet's queue depth and this worker's busy slots
in the fleet's minute (``runs/history.py``), for the console's charts. On shutdown the record
is removed. A heartbeat that cannot be written (Redis restarting) is logged and tried again on
the next beat.
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from celery import Celery

from agentfleet.config import Settings
from agentfleet.protocol.task import FleetTask
from agentfleet.redis_client import broker_client
from agentfleet.registry import TaskInfo, WorkerRecord, WorkerRegistry
from agentfleet.runs import FleetHistory
from agentfleet.tasks.worker_load import WorkerLoad, read_load
from agentfleet.transport.layout import UNACKED, queue_keys

__all__ = ["Heartbeat", "limits_of", "llm_configured", "task_catalog"]

log = logging.getLogger("agentfleet.worker")


def llm_configured(settings: Settings) -> bool:
    """True when this process has an LLM endpoint: a key, or a Messages API base URL."""
    llm = settings.llm
    return bool(llm.base_url or llm.api_key or os.environ.get("ANTHROPIC_API_KEY"))


def task_catalog(tasks: Mapping[str, object]) -> dict[str, TaskInfo]:
    """What a worker registered, Celery's own ``celery.*`` tasks left out."""
    catalog: dict[str, TaskInfo] = {}
    for name, task in tasks.items():
        if name.startswith("celery."):
            continue
        model = getattr(task, "input_model", None) if isinstance(task, FleetTask) else None
        if model is None:
            catalog[name] = TaskInfo(fleet=isinstance(task, FleetTask))
            continue
        fields = model.model_fields
        catalog[name] = TaskInfo(
            fleet=True,
            params=tuple(fields),
            required=tuple(n for n, f in fields.items() if f.is_required()),
            llm=bool(getattr(task, "uses_llm", False)),
        )
    return catalog


@functools.cache
def _version() -> str:
    """The installed agentfleet's version ('' when it runs from a tree that is not installed)."""
    try:
        return metadata.version("agentfleet")
    except metadata.PackageNotFoundError:
        return ""


def limits_of(settings: Settings) -> dict[str, Any]:
    """The limiter configuration a worker applies, as its heartbeat carries it."""
    return {
        "table": {name: spec.model_dump(exclude_none=True) for name, spec in settings.limits.items()},
        "default": settings.limiter.default.model_dump(exclude_none=True),
        "max_parallelism": settings.limiter.max_parallelism,
    }


class Heartbeat:
    """Writes ``node``'s record every ``settings.worker.heartbeat_s`` seconds until stopped.
    ``pool`` is the worker's Celery pool, whose load the record reports (None: unknown)."""

    def __init__(
        self, settings: Settings, app: Celery, node: str, queues: list[str], *, pool: Any = None
    ) -> None:
        self.settings = settings
        self.registry = WorkerRegistry.from_settings(settings)
        self.history = FleetHistory(self.registry.client, prefix=settings.key_prefix)
        self.app = app
        self.node = node
        self.queues = tuple(queues)
        self.pool = pool
        self.host = socket.gethostname()
        self.started_at = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, load: WorkerLoad | None = None) -> WorkerRecord:
        load = load or read_load(self.pool)
        return WorkerRecord(
            node=self.node,
            queues=self.queues,
            tasks=task_catalog(self.app.tasks),
            task_modules=tuple(self.settings.task_modules),
            pid=os.getpid(),
            started_at=self.started_at,
            beat_at=time.time(),
            host=self.host,
            pool=load.pool,
            slots=load.slots,
            busy=load.busy,
            rss_bytes=load.rss_bytes,
            version=_version(),
            limits=limits_of(self.settings),
            llm=llm_configured(self.settings),
        )

    def _queue_depth(self) -> tuple[int, int]:
        """Messages waiting in the fleet's queues, and taken but not acknowledged."""
        pipe = broker_client(self.settings).pipeline(transaction=False)
        for name in self.settings.queues.model_dump().values():
            for key in queue_keys(name):
                pipe.llen(key)
        pipe.hlen(UNACKED)
        replies = [int(n) for n in pipe.execute()]
        return sum(replies[:-1]), replies[-1]

    def beat(self) -> None:
        load = read_load(self.pool)
        try:
            self.registry.beat(self.record(load))
        except Exception as exc:
            log.warning("could not write this worker's heartbeat (%s); trying again", exc)
            return
        try:
            queued, unacked = self._queue_depth()
            self.history.record_gauges(
                node=self.node, busy=load.busy, slots=load.slots, queued=queued, unacked=unacked
            )
        except Exception as exc:
            log.debug("could not note the fleet's queue depth (%s)", exc)

    def start(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._loop, name="agentfleet-heartbeat", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.worker.heartbeat_s):
            self.beat()

    def stop(self) -> None:
        self._stop.set()
        try:
            self.registry.remove(self.node)
        except Exception as exc:
            log.warning("could not remove this worker from the registry (%s); it expires", exc)
