"""Task events sent in batches of up to ``FLUSH_EVERY_S`` seconds by every worker.

A worker with Celery's event loop (prefork, threads) buffers its task events but publishes the
buffer at the loop's next turn: about one ``PUBLISH`` per item on a busy worker. Here the loop
publishes it every ``FLUSH_EVERY_S`` seconds instead (or once ``buffer_limit`` events wait).
A worker without an event loop (gevent, eventlet, solo; Celery leaves this undone: "XXX This
excludes eventlet/gevent, which should actually buffer") publishes each ``task-received``,
``task-started`` and ``task-succeeded`` on its own, three round trips per item, a fifth of a
busy gevent worker's CPU. ``BufferedTaskEvents`` is a consumer step that runs after Celery's
``Events`` step: there it makes the dispatcher buffer task events too, flushing them when
``buffer_limit`` are waiting and otherwise every ``FLUSH_EVERY_S`` seconds from a thread (a
greenlet on a patched gevent worker). Flower and ``celery events`` read the batches as they
read the event loop's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from celery import bootsteps

__all__ = ["FLUSH_EVERY_S", "STEP", "BufferedTaskEvents"]

#: The step's import path, as ``celery_config`` adds it to every worker's consumer.
STEP = "agentfleet.transport.events:BufferedTaskEvents"
#: Seconds a task event may wait in the buffer.
FLUSH_EVERY_S = 0.5

log = logging.getLogger("agentfleet.worker")


def _flush(dispatcher: Any) -> None:
    try:
        dispatcher.flush(errors=False)
    except Exception as exc:
        # The broker is away: the events stay buffered for the next flush.
        log.warning("could not send buffered task events: %s", exc)


class BufferedTaskEvents(bootsteps.StartStopStep):
    """Publishes a worker's task events in batches (see the module docstring)."""

    requires = ("celery.worker.consumer.events:Events",)

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        # Stops the periodic flush (the event loop's timer, or the flushing thread).
        self._stop_flushing: Callable[[], Any] | None = None

    def start(self, c: Any) -> None:
        dispatcher = c.event_dispatcher
        if dispatcher is None or not dispatcher.enabled:
            return  # no events are sent
        if self._stop_flushing is not None:
            self._stop_flushing()  # a restart after a lost connection
        if c.hub is not None:
            # The event loop buffers already: it publishes on a timer instead of every turn.
            dispatcher.on_send_buffered = None
            self._stop_flushing = c.hub.call_repeatedly(FLUSH_EVERY_S, lambda: _flush(dispatcher)).cancel
            return
        dispatcher.buffer_group = frozenset({"task"})
        stop = threading.Event()
        self._stop_flushing = stop.set

        def flush_now_and_then() -> None:
            while not stop.wait(FLUSH_EVERY_S):
                _flush(dispatcher)

        threading.Thread(target=flush_now_and_then, name="agentfleet-task-events", daemon=True).start()

    def stop(self, c: Any) -> None:
        if self._stop_flushing is None:
            return
        self._stop_flushing()
        self._stop_flushing = None
        if c.event_dispatcher is not None:
            c.event_dispatcher.flush()
