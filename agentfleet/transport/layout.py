"""kombu's Redis layout, read from kombu itself: where a queue's messages and the unacknowledged
ones are kept, and how a raw message names its delivery tag and task id.

kombu's Redis transport keeps a queue as a list, and one more list per priority step above 0,
named ``{queue}{sep}{step}``; every message a worker took and has not acknowledged is in the
hash ``unacked`` (delivery tag -> ``[message, exchange, routing key]``), with the time it was
taken in the sorted set ``unacked_index``. Messages are pushed on the left and taken from the
right. The separator, the steps and the two key names are kombu's class attributes, imported
here rather than copied, so a kombu that changes them changes them here too.
"""

from __future__ import annotations

import json
from typing import Any

from kombu.transport import redis as kombu_redis

__all__ = ["PRIORITY_SEP", "PRIORITY_STEPS", "UNACKED", "UNACKED_INDEX", "delivery_tag", "queue_keys"]

_CHANNEL: Any = kombu_redis.Channel

#: What joins a queue's name and a priority step in the name of that step's list.
PRIORITY_SEP: str = _CHANNEL.sep
#: The priority steps that have lists of their own (0 is the queue's own list).
PRIORITY_STEPS: tuple[int, ...] = tuple(int(step) for step in _CHANNEL.priority_steps)
#: The hash of messages taken and not acknowledged, by delivery tag.
UNACKED: str = _CHANNEL.unacked_key
#: The sorted set of those delivery tags, scored by when each was taken (epoch seconds).
UNACKED_INDEX: str = _CHANNEL.unacked_index_key


def queue_keys(*queues: str) -> list[str]:
    """The Redis lists holding the waiting messages of ``queues``, highest priority first."""
    keys: list[str] = []
    for queue in dict.fromkeys(queues):
        keys.extend(f"{queue}{PRIORITY_SEP}{step}" if step else queue for step in PRIORITY_STEPS)
    return keys


def delivery_tag(raw: str | bytes | None) -> str:
    """The delivery tag of a raw kombu message (``""`` for none, or one without a tag)."""
    if not raw:
        return ""
    try:
        message = json.loads(raw)
    except ValueError:
        return ""
    properties = message.get("properties") if isinstance(message, dict) else None
    tag = properties.get("delivery_tag") if isinstance(properties, dict) else None
    return str(tag) if tag else ""
