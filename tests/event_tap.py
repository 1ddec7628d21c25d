"""Watching what Celery tooling sees: every event real workers send, fed to Flower's own state."""

from __future__ import annotations

import threading
import time
from typing import Any

from celery import Celery
from flower import options as _flower_options  # noqa: F401  (Flower's command defines its options first)
from flower.events import EventsState


class EventTap:
    """Every event the cluster's workers send, fed to Flower's ``EventsState`` as Flower does."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.flower = EventsState()
        self.lock = threading.Lock()
        self.seen: list[tuple[str, str]] = []  # (type, task id) of every task event
        self.succeeded: list[tuple[str, str]] = []  # (task id, result repr) of each success
        self.receiver: Any = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._capture, daemon=True)

    def _on_event(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.flower.event(event)
            if "uuid" in event:
                self.seen.append((event["type"], event["uuid"]))
            if event.get("type") == "task-succeeded":
                self.succeeded.append((event["uuid"], str(event.get("result"))))

    def _capture(self) -> None:
        with self.app.connection_for_read() as connection:
            self.receiver = self.app.events.Receiver(connection, handlers={"*": self._on_event})
            self.ready.set()
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def counted(self, event_type: str) -> int:
        with self.lock:
            return sum(counter[event_type] for counter in self.flower.counter.values())

    def counted_of(self, event_type: str, task_ids: set[str]) -> int:
        """Events of ``event_type`` about the tasks ``task_ids`` (events are sent in batches:
        an earlier test's may still arrive)."""
        with self.lock:
            return sum(1 for kind, task_id in self.seen if kind == event_type and task_id in task_ids)

    def results_of(self, task_ids: set[str]) -> list[tuple[str, str]]:
        """``(task id, result repr)`` of every ``task-succeeded`` event about ``task_ids``."""
        with self.lock:
            return [(task_id, result) for task_id, result in self.succeeded if task_id in task_ids]

    def result_of(self, task_id: str) -> str | None:
        """The result a task's ``task-succeeded`` event carried (its repr), as Flower shows it."""
        with self.lock:
            task = self.flower.tasks.get(task_id)
            return task.result if task is not None else None

    def state_of(self, task_id: str) -> str | None:
        with self.lock:
            task = self.flower.tasks.get(task_id)
            return task.state if task is not None else None

    def __enter__(self) -> EventTap:
        self.thread.start()
        self.ready.wait(10)
        time.sleep(0.5)  # the receiver's queue is bound once its consumer starts
        return self

    def __exit__(self, *exc: object) -> None:
        self.receiver.should_stop = True
        self.thread.join(timeout=10)
