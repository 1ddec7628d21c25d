"""Failing over between the URLs of a ``;``-separated broker URL without leaving agentfleet's
transport.

kombu takes ``redis://a;redis://b`` as a list of alternates: when the connection to one fails,
``Connection.switch`` moves to the next, and re-reads the transport from that URL's scheme,
which is the name of kombu's own Redis transport: a worker that failed over went on with
kombu's stock transport (one message per round trip, acknowledgements in round trips of their
own), whatever the broker transport setting said. ``FailoverConnection`` is kombu's
connection whose ``switch`` keeps agentfleet's transport for the schemes it serves
(``broker_transport``); ``FleetAMQP`` is Celery's ``AMQP`` with that connection class, so every
connection the app makes (the worker's consumer, producers, pools, events) has it. Both seams
are public: Celery's app takes an ``amqp`` class, and ``AMQP.Connection`` is documented as the
broker connection class used.
"""

from __future__ import annotations

from typing import Any

from celery.app.amqp import AMQP
from kombu import Connection

from agentfleet.transport import broker_transport

__all__ = ["FailoverConnection", "FleetAMQP"]

# agentfleet's transports, as ``broker_transport`` names them.
_OURS = frozenset(
    {
        "agentfleet.transport.redis_channel:RedisTransport",
        "agentfleet.transport.redis_channel:SentinelTransport",
    }
)


def _is_ours(transport: Any) -> bool:
    if isinstance(transport, str):
        return transport in _OURS
    return f"{getattr(transport, '__module__', '')}:{getattr(transport, '__name__', '')}" in _OURS


class FailoverConnection(Connection):
    """kombu's connection that stays on agentfleet's transport when it fails over."""

    def switch(self, conn_str: str) -> None:
        ours = _is_ours(self.transport_cls)
        super().switch(conn_str)
        if ours and "://" in conn_str:
            # kombu took the transport from the URL's scheme: agentfleet's serves that scheme
            # too, unless it is one kombu's own must handle (``rediss://``, ``unix://``).
            self.transport_cls = broker_transport(conn_str) or self.transport_cls


class FleetAMQP(AMQP):
    """Celery's ``AMQP`` whose broker connections are ``FailoverConnection``."""

    Connection = FailoverConnection
