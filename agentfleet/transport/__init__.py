"""Everything of agentfleet that touches kombu's, redis-py's or Celery's internals, in one place.

- ``internals``: every private name relied on, by feature, checked at import; a feature whose
  names do not hold is off, with one warning, and the stock behaviour is used;
- ``layout``: kombu's Redis key layout (queue lists, priority lists, ``unacked``), from kombu;
- ``redis_channel``, ``intake``, ``scripts/``: the Redis and Sentinel transports (one shared
  client per channel, window-sized takes, batched acknowledgements, the quick poller);
- ``pools``: redis-py pools and connections without per-call overhead;
- ``malformed``, ``consumer``, ``diagnosis``: queue entries a worker cannot decode or deliver,
  taken out and handed to a receiver instead of stopping the worker (in the reads, in Celery's
  consumer, through Celery's signals), with what is wrong with each in words;
- ``stamping``: task messages stamped from one real message, for dispatch;
- ``broker_view``: which task messages the broker holds, for the reconciler;
- ``autoscale``, ``events``, ``result_repr``, ``request``: Celery's autoscaler, event
  dispatcher, tracer and request, extended.

Nothing outside this package uses a library's private name (``tests/test_private_names.py``).
"""

from __future__ import annotations

from agentfleet.transport.internals import enabled, report

__all__ = ["broker_transport", "consumer_class", "enabled", "report"]


def broker_transport(broker_url: str) -> str | None:
    """kombu's transport class for ``broker_url``: agentfleet's for ``redis://`` and
    ``sentinel://`` while kombu's private names it extends hold; None (kombu picks by the scheme,
    its own) for ``rediss://`` and ``unix://``, and whenever those names do not hold."""
    if not broker_url.startswith(("redis://", "sentinel://")) or not enabled("redis_transport"):
        return None
    if broker_url.startswith("sentinel://"):
        return "agentfleet.transport.redis_channel:SentinelTransport"
    return "agentfleet.transport.redis_channel:RedisTransport"


def consumer_class() -> str | None:
    """Celery's ``worker_consumer`` setting: agentfleet's consumer, which takes out the messages
    it cannot take instead of stopping (``consumer``); None (Celery's own) when what it
    overrides of Celery's consumer no longer holds."""
    return "agentfleet.transport.consumer:FleetConsumer" if enabled("fleet_consumer") else None
