"""How long the next message of each queue has been waiting to be taken.

kombu's Redis transport pushes a message on the left of its queue's list and workers pop
from the right, so the rightmost message is the next one a worker will take. A message
carries no time of its own; what can be measured is how long the same message has been the
next one: a queue whose workers take messages has that near zero whatever its depth, and a
queue nobody drains (workers gone, hung, or every slot busy for minutes) has it grow.

``agentfleet_queue_head_wait_seconds{queue,role}`` is that wait, for the longest-waiting of
the queue's priority lists (0 when the queue is empty). The first sighting is kept in Redis,
on Redis's clock, so every service replica reports the same figure and a restarted service
does not start again from zero. It is at most one scrape interval short of the truth.

Layout under the key prefix ``p``:

- ``p:queuehead:{list}``  hash: ``tag`` (the delivery tag of the message at the head of that
  broker list when last seen) and ``at`` (Unix time it was first seen there); expires after
  a day without a look, and is deleted when the list is empty
"""

from __future__ import annotations

import json
from typing import Any

from agentfleet.service.samples import Sample, Sources

__all__ = ["PRIORITY_STEPS", "collect_queue_age", "head_tag", "queue_keys"]

# kombu's Redis transport keeps a queue's messages of priority p > 0 in a list named
# queue + SEP + p; messages without a priority are in the list named after the queue.
_PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (3, 6, 9)
_STATE_TTL_S = 86400

_OBSERVE = """
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
local waits = {}
for i, key in ipairs(KEYS) do
  local tag = ARGV[i + 1]
  if tag == '' then
    redis.call('DEL', key)
    waits[i] = '0'
  else
    local seen = redis.call('HMGET', key, 'tag', 'at')
    local at = t
    if seen[1] == tag and seen[2] then at = tonumber(seen[2]) else
      redis.call('HSET', key, 'tag', tag, 'at', tostring(t))
    end
    redis.call('EXPIRE', key, ARGV[1])
    waits[i] = tostring(math.max(0, t - at))
  end
end
return waits
"""


def queue_keys(name: str) -> list[str]:
    """The Redis lists holding queue ``name``'s waiting messages, every priority included."""
    return [name, *(f"{name}{_PRIORITY_SEP}{step}" for step in PRIORITY_STEPS)]


def head_tag(raw: str | bytes | None) -> str:
    """The delivery tag of a raw kombu message (``""`` for none or one without a tag)."""
    if not raw:
        return ""
    try:
        message = json.loads(raw)
    except ValueError:
        return ""
    properties = message.get("properties") if isinstance(message, dict) else None
    tag = properties.get("delivery_tag") if isinstance(properties, dict) else None
    return str(tag) if tag else ""


def collect_queue_age(sources: Sources) -> list[Sample]:
    """Per queue, the seconds its next message has been the next one (0 when empty)."""
    client: Any = sources.store.client
    prefix = sources.settings.key_prefix
    queues = sources.settings.queues.model_dump()
    lists = [(role, name, key) for role, name in queues.items() for key in queue_keys(name)]
    pipe = client.pipeline(transaction=False)
    for _, _, key in lists:
        pipe.lindex(key, -1)
    tags = [head_tag(raw) for raw in pipe.execute()]
    state_keys = [f"{prefix}:queuehead:{key}" for _, _, key in lists]
    waits = client.eval(_OBSERVE, len(state_keys), *state_keys, _STATE_TTL_S, *tags)
    longest: dict[tuple[str, str], float] = {}
    for (role, name, _), wait in zip(lists, waits, strict=True):
        longest[(role, name)] = max(longest.get((role, name), 0.0), float(wait))
    return [
        Sample(
            "agentfleet_queue_head_wait_seconds",
            round(wait, 3),
            {"queue": name, "role": role},
            help=(
                "Seconds the next message of a queue has been waiting to be taken "
                "(0 when the queue is empty): grows while nothing drains the queue."
            ),
        )
        for (role, name), wait in longest.items()
    ]
