"""The cluster-wide limiter: acquire leave to call a downstream, or be told when to come back.

One ``acquire`` is one Redis round trip that checks, atomically, the downstream's pause, the
fleet ceiling (``max_parallelism``), the downstream's concurrency cap and every token bucket,
and takes all of them or none. If not granted, it sleeps the wait Redis computed and tries
again, but only within ``max_wait_s``; past that it raises ``Deferred`` with the wait, so the
task can be rescheduled instead of holding a worker slot.
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agentfleet.config import LimitSpec, Settings
from agentfleet.errors import Deferred
from agentfleet.leases import LeaseRenewer
from agentfleet.ratelimit.bucket import Unit
from agentfleet.ratelimit.limits import DownstreamLimits, LimitsTable
from agentfleet.ratelimit.names import FLEET
from agentfleet.ratelimit.permit import Permit
from agentfleet.ratelimit.status import BucketStatus, LimitStatus
from agentfleet.ratelimit.store import Admission, BucketGroup, RedisLimitStore
from agentfleet.redis_handles import StateRedis

__all__ = ["Limiter"]


class _LeaseIds:
    """Lease ids unique across hosts and processes: a random prefix and a counter.

    Cheaper than a fresh uuid4 per acquire. A forked child draws a prefix of its own at its
    first lease (the pid tells it apart), so it never takes its parent's ids.
    """

    def __init__(self) -> None:
        self._pid = -1
        self._prefix = ""
        self._counter = itertools.count()

    def next(self) -> str:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._prefix = uuid.uuid4().hex[:16]
            self._counter = itertools.count()
        return f"{self._prefix}{next(self._counter):x}"


@dataclass(frozen=True, slots=True)
class _Plan:
    """How to acquire for one tuple of downstreams, worked out once."""

    admission: Admission
    # Per bucket, where its cost is in (1, input_tokens, output_tokens).
    cost_index: tuple[int, ...]
    token_groups: tuple[BucketGroup, ...]

    def costs(self, input_tokens: int, output_tokens: int) -> list[int]:
        """Tokens each bucket is charged: 1 request, or the input or output tokens."""
        by_index = (1, input_tokens, output_tokens)
        return [by_index[i] for i in self.cost_index]


class Limiter:
    """Cluster-wide rate limits, concurrency caps and pauses, kept in Redis.

    ``limits`` maps a downstream to its ``LimitSpec``; any other downstream gets ``default``.
    A downstream with no limit at all still costs one round trip, which checks its pause: a
    429 seen by one worker holds every worker off it.
    ``lease_ttl_s`` (seconds) is how long a slot outlives a worker that died holding it;
    ``short_wait_s`` (seconds) is how long ``acquire`` may wait inline by default.
    ``idle_ttl_s`` (seconds) is how long statistics and the registry of seen downstreams are
    kept after their last use; ``unknown_hold_s`` (seconds) is the wait hint for a full
    semaphore before any release has shown how long slots are held. ``renewer`` keeps held
    slots alive (a worker's runtime shares its one; default: one of the limiter's own).
    """

    def __init__(
        self,
        client: StateRedis,
        *,
        prefix: str,
        limits: Mapping[str, LimitSpec],
        default: LimitSpec,
        max_parallelism: int | None = None,
        lease_ttl_s: float = 30.0,
        short_wait_s: float = 1.0,
        idle_ttl_s: float = 3600.0,
        unknown_hold_s: float = 0.1,
        renewer: LeaseRenewer | None = None,
    ) -> None:
        self.store = RedisLimitStore(
            client, prefix=prefix, idle_ttl_s=idle_ttl_s, unknown_hold_s=unknown_hold_s
        )
        self.table = LimitsTable(limits, default)
        self.max_parallelism = max_parallelism
        self.lease_ttl_s = lease_ttl_s
        self.short_wait_s = short_wait_s
        self._renewer = renewer if renewer is not None else LeaseRenewer()
        self._lease_ids = _LeaseIds()
        self._plans: dict[tuple[str, ...], _Plan] = {}

    @classmethod
    def from_settings(
        cls, settings: Settings, client: StateRedis | None = None, *, renewer: LeaseRenewer | None = None
    ) -> Limiter:
        """A limiter configured by ``settings``, on ``client`` or the state's Redis, its slots
        kept alive by ``renewer``."""
        if client is None:
            from agentfleet.redis_client import state_client

            client = state_client(settings)
        return cls(
            client,
            prefix=settings.key_prefix,
            limits=settings.limits,
            default=settings.limiter.default,
            max_parallelism=settings.limiter.max_parallelism,
            lease_ttl_s=settings.limiter.lease_ttl_s,
            short_wait_s=settings.limiter.short_wait_s,
            renewer=renewer,
        )

    # Acquire -----------------------------------------------------------------------------

    def acquire(
        self,
        downstream: str,
        *,
        also: Iterable[str] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
        max_wait_s: float | None = None,
    ) -> Permit:
        """Leave to call ``downstream`` (and every downstream in ``also``, atomically).

        The call costs one request from each request bucket, ``input_tokens`` from each input
        token bucket and ``output_tokens`` from each output token bucket. Waits inline up to
        ``max_wait_s`` seconds (default ``short_wait_s``); raises ``Deferred`` with the wait
        in seconds when it would take longer. A refusal takes nothing.
        """
        names = (downstream, *also)
        budget_s = self.short_wait_s if max_wait_s is None else max_wait_s
        plan = self._plan(names)
        costs = plan.costs(input_tokens, output_tokens)
        lease_id = self._lease_ids.next() if plan.admission.semaphores else ""
        started = time.monotonic()
        deadline = started + budget_s
        while True:
            decision = self.store.admit(
                plan.admission, costs, lease_id=lease_id, lease_ttl_s=self.lease_ttl_s
            )
            if decision.granted:
                break
            if time.monotonic() + decision.wait_s > deadline:
                raise Deferred(
                    decision.wait_s,
                    f"{decision.blocker}; ready in {decision.wait_s:.3f} s",
                    downstream=decision.downstream,
                )
            time.sleep(decision.wait_s)
        return Permit(
            names,
            store=self.store,
            renewer=self._renewer,
            lease_id=lease_id,
            semaphores=[name for name, _ in plan.admission.semaphores],
            lease_ttl_s=self.lease_ttl_s,
            token_groups=plan.token_groups,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            waited_s=time.monotonic() - started,
        )

    def _plan(self, names: tuple[str, ...]) -> _Plan:
        if names in self._plans:
            return self._plans[names]
        unique = tuple(dict.fromkeys(names))
        limited = [lim for lim in map(self.table.get, unique) if not lim.unlimited]
        plan = self._build_plan(unique, limited)
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        self._plans[names] = plan
        return plan

    def _build_plan(self, names: tuple[str, ...], limited: list[DownstreamLimits]) -> _Plan:
        semaphores: list[tuple[str, int]] = []
        if self.max_parallelism is not None:
            semaphores.append((FLEET, self.max_parallelism))
        semaphores += [(lim.name, lim.max_concurrency) for lim in limited if lim.max_concurrency]
        groups = tuple(BucketGroup(lim.name, lim.buckets) for lim in limited if lim.buckets)
        units = [bucket.unit for group in groups for bucket in group.buckets]
        return _Plan(
            admission=Admission(
                # Every downstream's pause is checked, limited or not: a 429 is the vendor's
                # limit, whatever ours says, and the same script call costs nothing more.
                pauses=names,
                groups=groups,
                semaphores=tuple(semaphores),
            ),
            cost_index=tuple(_COST_INDEX[unit] for unit in units),
            token_groups=tuple(
                group for group in groups if any(b.unit is not Unit.REQUEST for b in group.buckets)
            ),
        )

    # Pauses and status -------------------------------------------------------------------

    def pause(self, downstream: str, seconds: float) -> float:
        """Stop every worker calling ``downstream`` for ``seconds`` (say, a 429's Retry-After).

        A pause only ever lengthens. Returns paused-until, in epoch seconds (now, for a
        ``seconds`` of zero or less, which pauses nothing).
        """
        if seconds <= 0:
            return time.time()
        return self.store.pause(downstream, seconds)

    def status(self, downstream: str) -> LimitStatus:
        """``downstream`` as every worker sees it now (``FLEET`` for the fleet ceiling)."""
        if downstream == FLEET:
            limits = DownstreamLimits(
                FLEET,
                LimitSpec(max_concurrency=self.max_parallelism),
                True,
                (),
                self.max_parallelism,
            )
        else:
            limits = self.table.get(downstream)
        state = self.store.read(downstream, limits.buckets)
        buckets = tuple(
            BucketStatus(b.name, b.unit.value, tokens, b.capacity, b.rate_per_s)
            for b, tokens in zip(limits.buckets, state.tokens, strict=True)
        )
        paused_for_s = 0.0 if state.paused_until is None else state.paused_until - state.now
        return LimitStatus(
            downstream=downstream,
            configured=limits.configured,
            buckets=buckets,
            slots_in_use=state.holders,
            max_slots=limits.max_concurrency,
            paused_until=state.paused_until,
            paused_for_s=max(0.0, paused_for_s),
            limits=limits.spec.model_dump(exclude_none=True),
            leases_reclaimed=state.reclaimed,
        )

    def paused(self, longer_than_s: float = 0.0) -> dict[str, float]:
        """Downstreams paused for more than ``longer_than_s`` seconds yet, with the seconds left,
        longest first (one round trip)."""
        left = self.store.pauses()
        return dict(sorted(((d, s) for d, s in left.items() if s > longer_than_s), key=lambda p: -p[1]))

    def known_downstreams(self) -> list[str]:
        """Downstreams in the limits table or acquired or paused lately, sorted."""
        seen = set(self.table.configured()) | set(self.store.registered())
        seen.discard(FLEET)
        return sorted(seen)


_MAX_PLANS = 10_000
_COST_INDEX = {Unit.REQUEST: 0, Unit.INPUT_TOKEN: 1, Unit.OUTPUT_TOKEN: 2}
