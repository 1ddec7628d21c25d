"""Celery's worker consumer, taking out the messages it cannot take instead of stopping on them.

Celery's consumer turns a kombu message into a task request. A message it cannot turn into one
raises out of the consumer (a body of the wrong shape, a content type kombu trusts and Celery
cannot use): Celery logs "Unrecoverable error" and the worker stops, and on the Redis transport
the message, recorded as unacknowledged, comes back first for the next worker. A body that
does not decode is logged and acknowledged (``on_decode_error``), and gone.

``FleetConsumer`` is Celery's consumer, chosen by the documented ``worker_consumer`` setting,
whose task handler hands such a message to the malformed receiver (``transport.malformed``)
and acknowledges it, and whose ``on_decode_error`` does the same: on any transport, kombu's
stock one included. A header Celery reads only when the pool takes the task (the time limits:
a prefork worker may hand the task over later, from its event loop, where an error stops the
worker) and the task id (without one Celery runs the task and never acknowledges the message)
are checked on receipt. What is not the message's fault (the connection broke, the worker is
shutting down) is raised as before.
Celery's own refusals (an unknown task, a content type refused, an invalid task) reach the
receiver through Celery's signals (``malformed.install``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery.worker import state
from celery.worker.consumer import Consumer

from agentfleet.transport.diagnosis import header_problem
from agentfleet.transport.malformed import hand_over, message_entry, not_the_entry

__all__ = ["FleetConsumer"]


def _stopping() -> bool:
    # A worker shutting down may fail to hand good messages to its pool: not their fault.
    return any(flag is not None and flag is not False for flag in (state.should_stop, state.should_terminate))


def _id_problem(message: Any) -> str | None:
    """What keeps Celery from knowing the task id of a message it would otherwise run, or None.

    Celery reads the id from the headers, or for a body of protocol 1 fields (an object with
    ``args``) from the body when the headers lack it; without one it runs the task and then
    fails outside the body storing its result, and the message is never acknowledged. The body
    is looked at only when the headers have no id (Celery has decoded it by then anyway)."""
    headers = message.headers
    task_id = headers.get("id") if isinstance(headers, dict) else None
    if task_id is None:
        try:
            payload = message.payload
        except Exception:  # a body that does not decode: Celery's own handler says so
            return None
        if isinstance(payload, dict) and "args" in payload:
            task_id = payload.get("id")
    if isinstance(task_id, str) and task_id:
        return None
    return "its task id is missing or not a string"


def _take_out(message: Any, exc: BaseException, *, fallback: str = "") -> None:
    hand_over(message_entry(message, exc, fallback=fallback))
    if not message.acknowledged:
        message.ack()


class FleetConsumer(Consumer):
    """Celery's worker consumer; a message it cannot take goes to the malformed receiver."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        handle: Callable[[Any], Any] = super().create_task_handler(*args, **kwargs)
        errors = (*self.connection_errors, *self.channel_errors)

        def on_task_received(message: Any) -> Any:
            problem = header_problem(message.headers) or _id_problem(message)
            if problem is not None:
                # Read only when the pool takes the task, perhaps later, where nothing guards it.
                hand_over(message_entry(message, None, fallback=problem))
                message.ack()
                return None
            try:
                return handle(message)
            except Exception as exc:
                if not_the_entry(exc, errors) or _stopping():
                    raise
                _take_out(message, exc)
                return None

        return on_task_received

    def on_decode_error(self, message: Any, exc: BaseException) -> None:
        _take_out(message, exc, fallback=f"its body does not decode ({type(exc).__name__}: {exc})")
