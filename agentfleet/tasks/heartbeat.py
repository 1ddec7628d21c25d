"""The worker's heartbeat: what it serves, written to the registry while it runs.

Started by the ``worker_ready`` signal in the worker's main process: one record at once (so
dispatch admits work for its tasks as soon as it is ready), then one every
``worker.heartbeat_s`` seconds from a daemon thread. On shutdown the record is removed. A
heartbeat that cannot be written (Redis restarting) is logged and tried again on the next beat.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping

from celery import Celery

from agentfleet.config import Settings
from agentfleet.protocol.task import FleetTask
from agentfleet.registry import TaskInfo, WorkerRecord, WorkerRegistry

__all__ = ["Heartbeat", "task_catalog"]

log = logging.getLogger("agentfleet.worker")


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
        )
    return catalog


class Heartbeat:
    """Writes ``node``'s record every ``settings.worker.heartbeat_s`` seconds until stopped."""

    def __init__(self, settings: Settings, app: Celery, node: str, queues: list[str]) -> None:
        self.settings = settings
        self.registry = WorkerRegistry.from_settings(settings)
        self.app = app
        self.node = node
        self.queues = tuple(queues)
        self.started_at = time.time()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self) -> WorkerRecord:
        return WorkerRecord(
            node=self.node,
            queues=self.queues,
            tasks=task_catalog(self.app.tasks),
            task_modules=tuple(self.settings.task_modules),
            pid=os.getpid(),
            started_at=self.started_at,
            beat_at=time.time(),
        )

    def beat(self) -> None:
        try:
            self.registry.beat(self.record())
        except Exception as exc:
            log.warning("could not write this worker's heartbeat (%s); trying again", exc)

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
