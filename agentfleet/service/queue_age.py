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

Layout under the key prefix ``p`` (``agentfleet.keys.queue_head_key``), on the broker's Redis
(beside the lists it watches):

- ``p:queuehead:{list}``  hash: ``tag`` (the delivery tag of the message at the head of that
  broker list when last seen) and ``at`` (Unix time it was first seen there); expires after
  a day without a look, and is deleted when the list is empty
"""

from __future__ import annotations

from typing import Any

from agentfleet.keys import queue_head_key
from agentfleet.service.samples import Sample, Sources
from agentfleet.transport.layout import delivery_tag, queue_keys

__all__ = ["collect_queue_age"]

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


def collect_queue_age(sources: Sources) -> list[Sample]:
    """Per queue, the seconds its next message has been the next one (0 when empty)."""
    # The queues are the broker's; the first sightings are kept beside them.
    client: Any = sources.broker
    prefix = sources.settings.key_prefix
    queues = sources.settings.queues.model_dump()
    lists = [(role, name, key) for role, name in queues.items() for key in queue_keys(name)]
    pipe = client.pipeline(transaction=False)
    for _, _, key in lists:
        pipe.lindex(key, -1)
    tags = [delivery_tag(raw) for raw in pipe.execute()]
    state_keys = [queue_head_key(prefix, key) for _, _, key in lists]
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
