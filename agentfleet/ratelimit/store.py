"""The limiter's storage: atomic operations on Redis, with no policy of their own.

Each method is one script call. Times crossing this boundary are seconds (floats); inside the
scripts they are milliseconds of Redis server time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from agentfleet.errors import ConfigError, ConnectionFailed, UnexpectedError
from agentfleet.keys import LimiterKeys
from agentfleet.ratelimit.bucket import BucketSpec
from agentfleet.ratelimit.scripts import LimiterScripts
from agentfleet.redis_handles import StateRedis

__all__ = ["Admission", "BucketGroup", "Decision", "RedisLimitStore", "StoredState"]


@dataclass(frozen=True, slots=True)
class BucketGroup:
    """The token buckets of one downstream, refilled and stored together."""

    downstream: str
    buckets: tuple[BucketSpec, ...]


@dataclass(frozen=True, slots=True)
class Admission:
    """Everything one acquire must get at once.

    ``pauses`` are the downstreams whose pause blocks it, ``groups`` the buckets it draws from
    (costs are given per bucket, group after group), and ``semaphores`` the (name, limit) of
    each semaphore it takes a lease on.
    """

    pauses: tuple[str, ...]
    groups: tuple[BucketGroup, ...]
    semaphores: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer to an acquire: granted, or ``wait_s`` seconds until it would be.

    When refused, ``blocker`` says why and ``downstream`` names whose limit it is (``FLEET``
    for the fleet ceiling); with several blockers, the one with the longest wait.
    """

    granted: bool
    wait_s: float = 0.0
    blocker: str = ""
    downstream: str = ""


@dataclass(frozen=True, slots=True)
class StoredState:
    """A downstream's state as Redis holds it now. Times are epoch seconds of server time."""

    now: float
    paused_until: float | None
    holders: int
    tokens: tuple[float, ...]
    reclaimed: int = 0


@dataclass(frozen=True, slots=True)
class _Compiled:
    keys: list[str]
    fixed: bytes


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisLimitStore:
    """Runs the limiter scripts against one Redis client, under ``{<prefix>:rl}:`` (see ``agentfleet.keys``).

    ``idle_ttl_s`` (seconds) is how long the registry and hold-time statistics outlive their
    last use; buckets, pauses and lease sets expire on their own as soon as they are idle.
    ``unknown_hold_s`` (seconds) is the wait hint for a full semaphore before any release has
    shown how long its slots are held.
    """

    def __init__(
        self,
        client: StateRedis,
        *,
        prefix: str,
        idle_ttl_s: float = 3600.0,
        unknown_hold_s: float = 0.1,
    ) -> None:
        self.client = client
        self.keys = LimiterKeys(prefix)
        self.scripts = LimiterScripts.register(client)
        self._idle_ms = max(1, round(idle_ttl_s * 1000))
        self._unknown_hold_ms = max(1, round(unknown_hold_s * 1000))
        self._register_every_s = idle_ttl_s / 4
        self._registered_at: dict[str, float] = {}
        self._compiled: dict[tuple[Admission, float], _Compiled] = {}

    def _record(self, group: BucketGroup) -> str:
        return self.keys.buckets(group.downstream, (b.name for b in group.buckets))

    # Admission ---------------------------------------------------------------------------

    def admit(
        self,
        admission: Admission,
        costs: Sequence[float],
        *,
        lease_id: str,
        lease_ttl_s: float,
    ) -> Decision:
        """Take every lease and every bucket's cost (tokens, one per bucket) or nothing."""
        compiled = self._compile(admission, lease_ttl_s)
        args = [compiled.fixed, lease_id, *costs, *self._due_for_registry(admission)]
        reply = int(self._run(self.scripts.acquire, compiled.keys, args))
        if reply == 0:
            return Decision(True)
        wait_ms, position = divmod(reply, 256)
        downstream, blocker = self._blocker(admission, position)
        return Decision(False, wait_ms / 1000.0, blocker, downstream)

    def _compile(self, admission: Admission, lease_ttl_s: float) -> _Compiled:
        # Keys and the arguments that do not change between calls are built once: on the hot
        # path, encoding them costs as much as running the script.
        compiled = self._compiled.get((admission, lease_ttl_s))
        if compiled is None:
            buckets = sum(len(group.buckets) for group in admission.groups)
            parts = len(admission.pauses) + buckets + len(admission.semaphores)
            if parts >= 256:
                raise ConfigError(f"one acquire may check at most 255 limits, not {parts}")
            keys = [self.keys.registry]
            keys += [self.keys.pause(name) for name in admission.pauses]
            keys += [self._record(group) for group in admission.groups]
            for name, _ in admission.semaphores:
                keys += (self.keys.holders(name), self.keys.hold_time(name), self.keys.reclaimed(name))
            fixed: list[float] = [
                len(admission.pauses),
                len(admission.groups),
                len(admission.semaphores),
                self._idle_ms,
                self._unknown_hold_ms,
                max(1, round(lease_ttl_s * 1000)),
            ]
            for group in admission.groups:
                fixed.append(len(group.buckets))
                for bucket in group.buckets:
                    fixed += (bucket.rate_per_s, bucket.capacity)
            fixed += [limit for _, limit in admission.semaphores]
            compiled = _Compiled(keys, json.dumps(fixed).encode())
            if len(self._compiled) >= _MAX_CACHED:
                self._compiled.clear()
            self._compiled[admission, lease_ttl_s] = compiled
        return compiled

    def _due_for_registry(self, admission: Admission) -> list[str]:
        # Registering on every call would add writes to the hot path for a list that only
        # `limits show` reads; a few times per idle period keeps it current.
        now = time.monotonic()
        due = []
        for name in admission.pauses:
            last = self._registered_at.get(name)
            if last is None or now - last >= self._register_every_s:
                if len(self._registered_at) >= _MAX_CACHED:
                    self._registered_at.clear()
                self._registered_at[name] = now
                due.append(name)
        return due

    @staticmethod
    def _blocker(admission: Admission, position: int) -> tuple[str, str]:
        index = position - 1
        if index < len(admission.pauses):
            name = admission.pauses[index]
            return name, f"{name} is paused"
        index -= len(admission.pauses)
        for group in admission.groups:
            if index < len(group.buckets):
                bucket = group.buckets[index].name
                return group.downstream, f"{group.downstream}: {bucket} bucket is empty"
            index -= len(group.buckets)
        name, limit = admission.semaphores[index]
        return name, f"{name}: all {limit} concurrency slots are held"

    # Leases ------------------------------------------------------------------------------

    def release(self, semaphores: Sequence[str], lease_id: str, *, held_s: float) -> int:
        """Give back the lease on each semaphore; returns how many were still held."""
        keys: list[str] = []
        for name in semaphores:
            keys += (self.keys.holders(name), self.keys.hold_time(name))
        args = [lease_id, max(0, round(held_s * 1000)), self._idle_ms]
        return int(self._run(self.scripts.release, keys, args))

    def renew(self, semaphores: Sequence[str], lease_id: str, *, lease_ttl_s: float) -> int:
        """Extend the lease on each semaphore to ``lease_ttl_s`` from now; returns how many."""
        keys = [self.keys.holders(name) for name in semaphores]
        args = [lease_id, max(1, round(lease_ttl_s * 1000)), self._idle_ms]
        return int(self._run(self.scripts.renew, keys, args))

    # Buckets and pauses ------------------------------------------------------------------

    def adjust(self, groups: Sequence[BucketGroup], amounts: Sequence[float]) -> None:
        """Add ``amounts`` (tokens, one per bucket, group after group; negative takes).

        No bucket goes above its capacity.
        """
        keys = [self._record(group) for group in groups]
        args: list[float] = []
        remaining = iter(amounts)
        for group in groups:
            args.append(len(group.buckets))
            for bucket in group.buckets:
                args += (bucket.rate_per_s, bucket.capacity, next(remaining))
        if keys:
            self._run(self.scripts.refund, keys, args)

    def pause(self, downstream: str, seconds: float) -> float:
        """Pause ``downstream`` for ``seconds`` unless already paused longer.

        Returns paused-until, epoch seconds of server time.
        """
        keys = [self.keys.pause(downstream), self.keys.registry]
        args = [max(1, round(seconds * 1000)), downstream, self._idle_ms]
        return float(_text(self._run(self.scripts.pause, keys, args))) / 1000.0

    def read(self, downstream: str, buckets: Sequence[BucketSpec]) -> StoredState:
        """Pause, live lease holders and tokens per bucket of ``downstream``, changing nothing."""
        group = BucketGroup(downstream, tuple(buckets))
        keys = [
            self.keys.pause(downstream),
            self.keys.holders(downstream),
            self._record(group),
            self.keys.reclaimed(downstream),
        ]
        args: list[float] = []
        for bucket in buckets:
            args += (bucket.rate_per_s, bucket.capacity)
        reply = [_text(v) for v in self._run(self.scripts.status, keys, args)]
        return StoredState(
            now=float(reply[0]) / 1000.0,
            paused_until=float(reply[1]) / 1000.0 if reply[1] else None,
            holders=int(reply[2]),
            reclaimed=int(reply[3] or 0),
            tokens=tuple(float(v) for v in reply[4:]),
        )

    def registered(self) -> list[str]:
        """Downstreams acquired or paused within the idle TTL, oldest first."""
        return [_text(v) for v in self._call(self.client.zrange, self.keys.registry, 0, -1)]

    def pauses(self) -> dict[str, float]:
        """Seconds of pause left, by Redis server time, for each known downstream paused now."""
        names = self.registered()
        if not names:
            return {}
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        pipe.mget([self.keys.pause(name) for name in names])
        (seconds, micros), until = self._call(pipe.execute)
        now_ms = int(seconds) * 1000 + int(micros) / 1000
        return {
            name: (float(_text(ms)) - now_ms) / 1000.0
            for name, ms in zip(names, until, strict=True)
            if ms is not None and float(_text(ms)) > now_ms
        }

    # Errors ------------------------------------------------------------------------------

    def _run(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self._call(script, keys=keys, args=args)

    @staticmethod
    def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            raise ConnectionFailed(f"rate limiter cannot reach Redis: {exc}") from exc
        except redis.RedisError as exc:
            raise UnexpectedError(f"rate limiter script failed: {exc}") from exc


_MAX_CACHED = 10_000
