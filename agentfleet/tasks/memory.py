"""What an execution remembers across executions of its item: steps that ran, checkpoints.

``StoredMemory`` is an item's memory in Redis (``agentfleet.runs.memory``), fenced by the claim
of the delivery running it; ``LocalMemory`` lives in this process only (``agentfleet.testing``,
and contexts built without a store), so nothing there survives the execution.

``run_step`` is ``TaskContext.step``: the ``n``-th call of step ``name`` in an execution is
stored as ``s:{name}#{n}``; a later execution of the same item that reaches the same call gets
the stored result back without calling ``fn``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from agentfleet.errors import Deferred
from agentfleet.runs import Claim, MemoryStore, Refused
from agentfleet.tasks.item import jsonable

__all__ = ["LocalMemory", "Memory", "StoredMemory", "run_step", "step_field"]

T = TypeVar("T")


class Memory(Protocol):
    """An item's memory: fields holding JSON values. ``durable``: it outlives the execution."""

    @property
    def durable(self) -> bool: ...

    def read(self, fields: Sequence[str]) -> dict[str, Any]: ...

    def write(self, field: str, value: Any, *, once: bool = False) -> Any: ...


class StoredMemory:
    """Item ``key``'s memory in Redis, written under the claim ``token`` holds.

    A write once this process knows ``claim`` lost raises ``ClaimLost`` before it is sent; a
    write while another delivery holds the claim raises ``Deferred`` for ``claim_ttl_s``
    seconds: this copy stops and comes back when that one has ended (or died).
    """

    durable = True

    def __init__(
        self,
        store: MemoryStore,
        key: str,
        *,
        token: str = "",
        claim_ttl_s: float = 20.0,
        claim: Claim | None = None,
    ) -> None:
        self.store = store
        self.key = key
        self.token = token
        self.claim_ttl_s = claim_ttl_s
        self.claim = claim

    def read(self, fields: Sequence[str]) -> dict[str, Any]:
        return self.store.read(self.key, fields)

    def write(self, field: str, value: Any, *, once: bool = False) -> Any:
        if self.claim is not None:
            self.claim.check()
        try:
            return self.store.write(self.key, field, value, once=once, token=self.token)
        except Refused:
            raise Deferred(self.claim_ttl_s, "another delivery holds this item's claim") from None


class LocalMemory:
    """A memory in this process: what one execution wrote, gone when it ends."""

    durable = False

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}

    def read(self, fields: Sequence[str]) -> dict[str, Any]:
        return {f: json.loads(self.fields[f]) for f in fields if f in self.fields}

    def write(self, field: str, value: Any, *, once: bool = False) -> Any:
        if not (once and field in self.fields):
            self.fields[field] = json.dumps(value)
        return json.loads(self.fields[field])


def step_field(name: str, call: int) -> str:
    """The memory field of the ``call``-th call (from 0) of step ``name`` in an execution."""
    return f"s:{name}#{call}"


def run_step(
    memory: Memory, field: str, fn: Callable[..., T], args: Sequence[Any], kwargs: dict[str, Any]
) -> Any:
    """``fn(*args, **kwargs)`` once per item: the stored result if ``field`` holds one, else
    the call's result, stored (the first stored wins) and returned as stored (through JSON)."""
    found = memory.read([field])
    if field in found:
        return found[field]
    return memory.write(field, jsonable(fn(*args, **kwargs)), once=True)
