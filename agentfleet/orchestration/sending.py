"""Sending a run's messages to the broker, each call safe for ``Patience`` to send twice.

A task message sent twice is a redelivery, which claims and stored outcomes make harmless
(the delivery contract), so every function here is ``@repeatable``. ``orchestration/dispatch.py``
sends its chunks through them.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery
from celery.canvas import Signature

from agentfleet.outages import repeatable
from agentfleet.redis_handles import BrokerRedis
from agentfleet.transport.stamping import MessageTemplate, publish_all

__all__ = ["message_template", "publish_batch", "publish_one", "push_messages", "queued_messages"]


@repeatable
def push_messages(broker: BrokerRedis, key: str, raws: list[bytes]) -> None:
    """Push stamped messages onto the queue ``key`` in one ``LPUSH``."""
    # LPUSH puts each value at the head in turn: the first item is the first taken.
    broker.lpush(key, *raws)


@repeatable
def publish_one(signature: Signature) -> None:
    """Send one message through Celery."""
    signature.apply_async()


@repeatable
def publish_batch(app: Celery, sigs: Sequence[Signature]) -> None:
    """Send ``sigs`` in one kombu publish batch."""
    publish_all(app, sigs)


@repeatable
def message_template(app: Celery, probe: Signature) -> MessageTemplate:
    """The message ``probe`` would be, to stamp items from."""
    # Captures the message ``probe`` would be; sends nothing.
    return MessageTemplate.from_signature(app, probe)


@repeatable
def queued_messages(broker: BrokerRedis, keys: Sequence[str]) -> int:
    """Messages waiting in the queues ``keys``, in one round trip."""
    pipe = broker.pipeline(transaction=False)
    for key in keys:
        pipe.llen(key)
    return sum(int(n) for n in pipe.execute())
