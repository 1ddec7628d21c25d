"""Queue entries a worker cannot decode or deliver as tasks: taken out and handed on, never fatal.

A Redis queue can hold anything: bytes that are not JSON, JSON that is not kombu's envelope, an
envelope whose body does not decode, a task message in a content type the workers refuse or for
a task no worker has. kombu and Celery stop the consumer on the first of these ("Unrecoverable
error"), and a message that broke a delivery after it was recorded comes back first for the
next worker, which stops too. Here every such entry leaves its queue and goes to the
*receiver* the worker runtime installed (``install``), which keeps it as a dead letter of
category ``malformed`` or drops and counts it; the worker goes on. Where entries are caught:

- the transport's reads (``intake.TakeMore``): the first message of a look (``BRPOP``; its
  raw reply is noted as it is parsed, ``note_replies``) and the rest of the window
  (``take.lua``, which hands back unrecorded the entries it cannot record);
- Celery's consumer (``consumer.FleetConsumer``): a message kombu delivered and Celery could not
  take, and a body that does not decode (``on_decode_error``);
- Celery's own refusals, through its public signals: ``task_unknown`` (no such task on this
  worker) and ``task_rejected`` (a content type refused, an invalid task, not a task message).

What is not the entry's fault (the connection to Redis broke, Redis refused a command) is
raised as before (``not_the_entry``): the consumer reconnects and the messages come back.
What is wrong with an entry, in words, is ``diagnosis``'s.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from celery.signals import task_rejected, task_unknown
from kombu.serialization import prepare_accept_content
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

from agentfleet.transport.diagnosis import diagnose, quoted, shape_problem

__all__ = [
    "MalformedEntry",
    "Receiver",
    "Taken",
    "drop_record",
    "hand_over",
    "install",
    "message_entry",
    "message_raw",
    "not_the_entry",
    "note_replies",
    "reason_for",
    "uninstall",
]

log = logging.getLogger("agentfleet.worker")


@dataclass(frozen=True)
class MalformedEntry:
    """A queue entry taken out because it cannot be decoded or delivered as a task.

    ``raw`` is the entry as it was in the queue (for a message Celery refused, kombu's envelope
    of it, rebuilt); ``reason`` says what is wrong, in words; ``queue`` is where it was found
    (empty when not known).
    """

    raw: bytes
    reason: str
    queue: str = ""


Receiver = Callable[[MalformedEntry], None]


class _Installed:
    receiver: Receiver | None = None
    accept: frozenset[str] | None = None


def install(receiver: Receiver, *, accept: Iterable[str] | None = None) -> None:
    """Hand every malformed entry this process finds to ``receiver``, and judge content types
    against ``accept`` (Celery's ``accept_content``: serializer names or content types);
    connects Celery's ``task_unknown`` and ``task_rejected`` signals. Installing again replaces
    the receiver."""
    _Installed.receiver = receiver
    _Installed.accept = frozenset(prepare_accept_content(accept)) if accept is not None else None
    task_unknown.connect(_on_task_unknown, weak=False, dispatch_uid="agentfleet.malformed.unknown")
    task_rejected.connect(_on_task_rejected, weak=False, dispatch_uid="agentfleet.malformed.rejected")


def uninstall() -> None:
    """Back to no receiver: entries are logged and dropped."""
    _Installed.receiver = None
    _Installed.accept = None
    task_unknown.disconnect(dispatch_uid="agentfleet.malformed.unknown")
    task_rejected.disconnect(dispatch_uid="agentfleet.malformed.rejected")


def hand_over(entry: MalformedEntry) -> None:
    """Give ``entry`` to the installed receiver. Never raises: a receiver that fails, or none
    installed, leaves one log line, and the entry is gone."""
    receiver = _Installed.receiver
    if receiver is None:
        log.warning(
            "dropped a malformed entry of %s (%d bytes): %s; no receiver is installed",
            entry.queue or "a queue",
            len(entry.raw),
            entry.reason,
        )
        return
    try:
        receiver(entry)
    except Exception as exc:
        log.error(
            "dropped a malformed entry of %s (%d bytes): %s; its receiver failed: %s",
            entry.queue or "a queue",
            len(entry.raw),
            entry.reason,
            exc,
        )


def not_the_entry(exc: BaseException, errors: Iterable[type[BaseException]]) -> bool:
    """True when ``exc`` says nothing about the entry being read: one of the transport's
    connection or channel ``errors`` (Redis went away or refused a command), memory running
    out, or anything that is not an ``Exception`` (shutdown, interrupts).

    kombu counts ``KeyError`` among the Redis transport's connection errors: a builtin error
    other than ``OSError`` is left out of ``errors`` here, for a message missing a field raises
    just that.
    """
    own = tuple(error for error in errors if error.__module__ != "builtins" or issubclass(error, OSError))
    return not isinstance(exc, Exception) or isinstance(exc, (*own, MemoryError))


def as_bytes(raw: bytes | str) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")


def reason_for(raw: bytes | str, exc: BaseException | None, *, fallback: str = "") -> str:
    """Why ``raw`` was taken out: what ``diagnose`` finds (against the installed content
    types), else ``fallback``, else the exception it raised."""
    try:
        found = diagnose(raw, accept=_Installed.accept)
    except Exception as exc:
        # An entry odd enough to trip the diagnosis itself: its exception says enough.
        log.debug("could not diagnose a malformed entry: %r", exc)
        found = None
    if found is not None:
        return found
    if fallback:
        return fallback
    if exc is not None:
        return f"the worker could not take it ({quoted(exc)})"
    return "the worker could not take it"


# Kombu messages --------------------------------------------------------------------------


def message_raw(message: Any) -> bytes:
    """The queue entry of a kombu ``message``: its envelope as the Redis transport keeps it."""
    serializable = getattr(message, "serializable", None)
    if callable(serializable):
        try:
            return json.dumps(serializable(), default=str).encode("utf-8")
        except Exception:
            pass  # a body the channel cannot encode again: the parts below
    body = message.body
    envelope = {
        "body": bytes_to_str(body) if isinstance(body, bytes) else body,
        "content-type": message.content_type,
        "content-encoding": message.content_encoding,
        "headers": message.headers,
        "properties": message.properties,
    }
    return json.dumps(envelope, default=str).encode("utf-8")


def message_entry(message: Any, exc: BaseException | None, *, fallback: str = "") -> MalformedEntry:
    """The malformed entry of a kombu ``message`` Celery could not take (``exc``, if it raised)."""
    raw = message_raw(message)
    info = getattr(message, "delivery_info", None) or {}
    queue = info.get("routing_key") if isinstance(info, dict) else None
    return MalformedEntry(raw, reason_for(raw, exc, fallback=fallback), str(queue or ""))


def _on_task_unknown(message: Any = None, name: Any = None, **_: Any) -> None:
    # Celery has rejected the message already (and marked the task failed).
    if message is not None:
        hand_over(message_entry(message, None, fallback=f"this worker has no task named {name!r}"))


def _on_task_rejected(message: Any = None, exc: BaseException | None = None, **_: Any) -> None:
    # Celery has rejected the message already: a content type refused, an invalid task, or no
    # task name in its headers or body.
    if message is not None:
        not_a_task = "not a Celery task message (no task name in its headers or body)"
        hand_over(message_entry(message, exc, fallback="" if exc is not None else not_a_task))


# The transport's reads -------------------------------------------------------------------


def note_replies(client: Any, command: str, note: Callable[[Any], None]) -> None:
    """Make redis-py ``client`` pass every parsed reply to ``command`` to ``note`` too (through
    its public response callbacks), so that a reader keeps the raw entry it popped."""
    parse = client.response_callbacks.get(command)

    def noted(response: Any, **options: Any) -> Any:
        reply = parse(response, **options) if parse is not None else response
        note(reply)
        return reply

    client.set_response_callback(command, noted)


def drop_record(qos: Any, tag: str, exc: BaseException) -> None:
    """Remove ``tag``'s unacknowledged record, which kombu could not read back (``exc``), and
    hand the record over as a malformed entry."""
    with qos.pipe_or_acquire() as pipe:
        record, *_ = (
            pipe.hget(qos.unacked_key, tag)
            .zrem(qos.unacked_index_key, tag)
            .hdel(qos.unacked_key, tag)
            .execute()
        )
    if record:
        reason = f"its unacknowledged record could not be read back ({quoted(exc)})"
        hand_over(MalformedEntry(as_bytes(record), reason))


@dataclass
class Taken:
    """One entry a ``take.lua`` call returned: the raw entry, whether the script recorded it as
    unacknowledged (under ``tag``), and its kombu payload, or what keeps it from being one (its
    shape: the body is decoded when it is delivered)."""

    raw: bytes
    recorded: bool
    tag: str
    payload: dict[str, Any] | None
    problem: str | None
    error: Exception | None = None

    @classmethod
    def of(cls, item: Any) -> Taken:
        """The entry of one element of the script's reply: the raw message (recorded), or a
        list holding it (not recorded: no delivery tag or info the script could read)."""
        recorded = not isinstance(item, list)
        raw = as_bytes(item if recorded else item[0])
        try:
            payload = loads(bytes_to_str(raw))
        except Exception as exc:
            return cls(raw, recorded, _plain_tag(raw), None, None, exc)
        # The shape only: a body that does not decode fails in kombu's delivery, which takes the
        # entry out as the first message of a look is (decoding it here too would do it twice).
        problem = shape_problem(payload)
        tag = payload["properties"]["delivery_tag"] if problem is None else _plain_tag(raw)
        return cls(raw, recorded, tag, payload if problem is None else None, problem)

    def entry(self, queue: str, exc: BaseException | None = None) -> MalformedEntry:
        """This entry as a malformed one (``exc``: what its delivery raised)."""
        reason = reason_for(self.raw, exc or self.error, fallback=self.problem or "")
        return MalformedEntry(self.raw, reason, queue)


# A delivery tag as kombu writes it; the last is the envelope's own (``properties`` comes last).
_TAG = re.compile(rb'"delivery_tag":\s*"([^"\\]+)"')


def _plain_tag(raw: bytes) -> str:
    # The tag the script recorded an entry under, read without kombu's decoding hooks; for what
    # Python's JSON does not read and Lua's did, from the text.
    try:
        payload = json.loads(bytes_to_str(raw), strict=False)
    except (ValueError, RecursionError):
        found = _TAG.findall(raw)
        return found[-1].decode("utf-8", "replace") if found else ""
    properties = payload.get("properties") if isinstance(payload, dict) else None
    tag = properties.get("delivery_tag") if isinstance(properties, dict) else None
    return tag if isinstance(tag, str) else ""
