"""Which task messages the broker still holds: queued, or delivered and not yet acknowledged.

kombu's Redis transport keeps each queue's waiting messages in lists and every message a worker
took but has not acknowledged in a hash (``layout``). A Celery message names its task id in
its headers; its body is base64, so a task's own input can never look like a header.

An unacknowledged message counts as waiting while a worker may still be about to run it: its
ETA (a countdown) is not yet ``grace_s`` seconds past, or it was taken less than ``grace_s``
seconds ago. Beyond that nobody is working on it (the reconciler only asks about items with no
live claim): it is *stale*, the copy a dead worker was holding.

A queue can hold bytes that are not text (a malformed entry no worker has taken out yet): the
messages are read as bytes (redis-py's ``NEVER_DECODE``, on a client that decodes replies too)
and decoded here, any such byte replaced, so that one entry never fails the whole read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from redis.client import NEVER_DECODE

from agentfleet.redis_handles import BrokerRedis
from agentfleet.transport.layout import UNACKED, UNACKED_INDEX, queue_keys

__all__ = ["BrokerView", "forget_stale", "read_broker"]

_TASK_ID = re.compile(r'"id":\s*"([^"]+)"')
# Replies as bytes, also from a client that decodes (see the module docstring).
_RAW = {NEVER_DECODE: True}
_CHUNK = 2000


@dataclass
class BrokerView:
    """What the broker holds: task ids with a waiting message, stale unacknowledged copies by
    task id (their delivery tags), and whether every queue could be read (``complete``)."""

    waiting: set[str] = field(default_factory=set)
    stale: dict[str, list[str]] = field(default_factory=dict)
    complete: bool = True


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _eta(headers: dict[str, Any]) -> float | None:
    raw = headers.get("eta")
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw)).timestamp()
    except ValueError:
        return None


def _read_queues(client: BrokerRedis, queues: Iterable[str], view: BrokerView, max_scan: int) -> None:
    keys = queue_keys(*queues)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.llen(key)
    lengths = pipe.execute()
    if sum(lengths) > max_scan:
        view.complete = False
        return
    for key, length in zip(keys, lengths, strict=True):
        for start in range(0, length, _CHUNK):
            chunk = client.execute_command("LRANGE", key, start, start + _CHUNK - 1, **_RAW)
            view.waiting.update(_TASK_ID.findall("\n".join(_text(raw) for raw in chunk)))


def _read_unacked(client: BrokerRedis, view: BrokerView, *, grace_s: float, now: float) -> None:
    pipe = client.pipeline(transaction=False)
    pipe.execute_command("HGETALL", UNACKED, **_RAW)
    pipe.execute_command("ZRANGE", UNACKED_INDEX, 0, -1, "WITHSCORES", withscores=True, **_RAW)
    entries, index = pipe.execute()
    taken_at = {_text(tag): float(score) for tag, score in index}
    for raw_tag, raw in entries.items():
        tag = _text(raw_tag)
        try:
            message = json.loads(_text(raw))[0]
            headers = message.get("headers") or {}
            task_id = str(headers["id"])
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            continue
        eta = _eta(headers)
        taken = float(taken_at.get(tag, now))
        if (eta is not None and eta > now - grace_s) or taken > now - grace_s:
            view.waiting.add(task_id)
        else:
            view.stale.setdefault(task_id, []).append(tag)


def read_broker(
    client: BrokerRedis, queues: Iterable[str], *, grace_s: float, max_scan: int, now: float
) -> BrokerView:
    """Read every message of ``queues`` and every unacknowledged one (times in epoch seconds).

    With more than ``max_scan`` messages queued the queues are not read and the view is
    incomplete: nothing can be said to be missing then.
    """
    view = BrokerView()
    _read_queues(client, queues, view, max_scan)
    _read_unacked(client, view, grace_s=grace_s, now=now)
    return view


def forget_stale(client: BrokerRedis, tags: Iterable[str]) -> None:
    """Drop unacknowledged copies nobody works on, so the visibility timeout does not bring them
    back after the reconciler has sent the item again."""
    tags = list(tags)
    if not tags:
        return
    pipe = client.pipeline(transaction=True)
    pipe.hdel(UNACKED, *tags)
    pipe.zrem(UNACKED_INDEX, *tags)
    pipe.execute()
