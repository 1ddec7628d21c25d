"""An item's durable memory: its step results, its agents' checkpoints, its spending so far.

Layout under the key prefix ``p`` (the key is the item's idempotency key, or its pipeline
stage's or graph step's own key):

- ``p:mem:{<tag>}...``  hash (tagged like the item's other keys, ``agentfleet.keys``):

  - ``s:{name}#{n}``           a step's result (JSON): the ``n``-th call of step ``name`` in
                               an execution (``TaskContext.step``)
  - ``a{n}``                   the ``n``-th agent's conversation checkpoint (JSON), rewritten
                               after every model turn (``tasks/checkpoint.py``)
  - ``a{n}:t:{tool_use_id}``   one tool call's result (JSON), written once
  - ``a{n}:w:{tool_use_id}``   seconds that tool call has waited for rate limits so far
  - ``$usd``, ``$tokens``, ``$turns``, ``$s``  what the item spent over all its attempts:
                               US dollars, tokens, model calls, seconds executing (moved only
                               by ``runs/scripts/spend/``, see ``runs/budgets.py``)
  - ``$seq:{token}``           the last spending report of the delivery holding ``token``
                               counted, so a report sent twice counts once

  It expires ``ttl_s`` after its last write, and ``finish.lua`` sets it to expire ``ttl_s``
  after the item's outcome is stored: it lives exactly as long as the outcome.

A write is fenced by the item's claim (``p:claim:{key}``): while another delivery holds the
claim, a delivery that lost it (frozen, then woken) cannot overwrite the new holder's
progress. A write with no claim around (the claim lapsed and nobody took it) goes through.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentfleet.keys import RunKeys
from agentfleet.redis_handles import StateRedis
from agentfleet.runs.store import RUNS_LUA

__all__ = ["MemoryStore", "Refused"]


class Refused(Exception):
    """Another delivery holds the item's claim: this one must not write its memory."""


class MemoryStore:
    """Items' memories in Redis. Safe to share between threads."""

    def __init__(self, client: StateRedis, *, prefix: str = "af", ttl_s: int = 7 * 86400) -> None:
        self.client: Any = client
        self.prefix = prefix
        self.keys = RunKeys(prefix)
        self.ttl_s = ttl_s
        self._put = RUNS_LUA.register(client, "memory_put")["memory_put"]

    def key(self, key: str) -> str:
        return self.keys.item("mem", key)

    def claim_key(self, key: str) -> str:
        return self.keys.item("claim", key)

    def read(self, key: str, fields: Sequence[str]) -> dict[str, Any]:
        """The ``fields`` of item ``key`` that are stored, decoded from JSON."""
        if not fields:
            return {}
        values = self.client.hmget(self.key(key), list(fields))
        return {f: json.loads(v) for f, v in zip(fields, values, strict=True) if v is not None}

    def write(self, key: str, field: str, value: Any, *, once: bool = False, token: str = "") -> Any:
        """Store ``value`` (JSON) in ``field``; with ``once`` a value already there is kept.

        Returns the value stored now (decoded). Raises ``Refused`` while a delivery other than
        ``token``'s holds the item's claim (no ``token``: never refused).
        """
        written, stored = self._put(
            keys=[self.key(key), self.claim_key(key)],
            args=[field, json.dumps(value), int(once), token, self.ttl_s],
        )
        if not int(written):
            raise Refused(key)
        return json.loads(stored)

    def forget_spending(self, key: str) -> None:
        """Start the item's spending over (a requeue gives it a fresh budget); its steps and
        checkpoints stay."""
        mem = self.key(key)
        fields = [f for f in self.client.hkeys(mem) if f.startswith("$")]
        if fields:
            self.client.hdel(mem, *fields)
