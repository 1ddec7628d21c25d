"""A permit: the leases and tokens one acquire took, and how to give them back."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from types import TracebackType

from agentfleet.errors import AgentfleetError
from agentfleet.leases import LeaseRenewer
from agentfleet.ratelimit.bucket import Unit
from agentfleet.ratelimit.store import BucketGroup, RedisLimitStore

__all__ = ["Permit"]

log = logging.getLogger("agentfleet.ratelimit")


class Permit:
    """Leave to make one call to ``downstreams``.

    Use it as a context manager, or call ``release()`` (idempotent, thread-safe) when the call
    is over. While held, its leases are renewed in the background every third of
    ``lease_ttl_s`` seconds. ``waited_s`` is how long the acquire slept before it was granted.
    ``input_tokens`` and ``output_tokens`` are the token estimates charged, which
    ``reconcile()`` corrects once the real usage is known.
    """

    __slots__ = (
        "__weakref__",
        "_lock",
        "_released",
        "_renewer",
        "_semaphores",
        "_store",
        "_token_groups",
        "downstreams",
        "granted_at",
        "input_tokens",
        "lease_id",
        "lease_ttl_s",
        "output_tokens",
        "renew_due",
        "waited_s",
    )

    def __init__(
        self,
        downstreams: tuple[str, ...],
        *,
        store: RedisLimitStore | None = None,
        renewer: LeaseRenewer | None = None,
        lease_id: str = "",
        semaphores: Sequence[str] = (),
        lease_ttl_s: float = 0.0,
        token_groups: Sequence[BucketGroup] = (),
        input_tokens: int = 0,
        output_tokens: int = 0,
        waited_s: float = 0.0,
    ) -> None:
        self.downstreams = downstreams
        self.lease_id = lease_id
        self.lease_ttl_s = lease_ttl_s
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.waited_s = waited_s
        self.granted_at = time.monotonic()
        self.renew_due = self.granted_at + lease_ttl_s / 3
        self._store = store
        self._renewer = renewer
        self._semaphores = tuple(semaphores)
        self._token_groups = tuple(token_groups)
        self._released = False
        self._lock = threading.Lock()
        if self._semaphores and renewer is not None:
            renewer.track(self)

    @property
    def downstream(self) -> str:
        """The first downstream the permit was asked for."""
        return self.downstreams[0]

    @property
    def released(self) -> bool:
        return self._released

    @property
    def holds_lease(self) -> bool:
        """True while the permit holds a concurrency slot."""
        return bool(self._semaphores) and not self._released

    def release(self) -> None:
        """Give back the concurrency slots. Safe to call twice; never raises for Redis.

        A slot whose release could not reach Redis comes back when its lease expires.
        """
        with self._lock:
            if self._released:
                return
            self._released = True
        if not self._semaphores or self._store is None:
            return
        if self._renewer is not None:
            self._renewer.forget(self)
        held_s = time.monotonic() - self.granted_at
        try:
            self._store.release(self._semaphores, self.lease_id, held_s=held_s)
        except AgentfleetError as exc:
            log.warning(
                "could not release a lease on %s; it expires by itself: %s",
                ",".join(self.downstreams),
                exc,
            )

    def renew(self) -> bool:
        """Extend the leases by ``lease_ttl_s`` seconds from now.

        Returns False when released, or when a lease had already expired and been taken away
        (its slot may be someone else's by now).
        """
        self.renew_due = time.monotonic() + self.lease_ttl_s / 3
        if self._released:
            return False
        if not self._semaphores or self._store is None:
            return True
        renewed = self._store.renew(self._semaphores, self.lease_id, lease_ttl_s=self.lease_ttl_s)
        return renewed == len(self._semaphores)

    def reconcile(
        self,
        *,
        actual_input_tokens: int | None = None,
        actual_output_tokens: int | None = None,
    ) -> None:
        """Settle the token buckets with the real usage.

        Tokens estimated but not used go back (up to each bucket's capacity); tokens used
        beyond the estimate are taken, which may put a bucket in debt. Calling it again with
        the same figures changes nothing.
        """
        delta_in = 0 if actual_input_tokens is None else self.input_tokens - actual_input_tokens
        delta_out = 0 if actual_output_tokens is None else self.output_tokens - actual_output_tokens
        if actual_input_tokens is not None:
            self.input_tokens = actual_input_tokens
        if actual_output_tokens is not None:
            self.output_tokens = actual_output_tokens
        if (delta_in == 0 and delta_out == 0) or self._store is None or not self._token_groups:
            return
        by_unit = {Unit.REQUEST: 0, Unit.INPUT_TOKEN: delta_in, Unit.OUTPUT_TOKEN: delta_out}
        amounts = [by_unit[b.unit] for group in self._token_groups for b in group.buckets]
        self._store.adjust(self._token_groups, amounts)

    def __enter__(self) -> Permit:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self._released else "held"
        return f"<Permit {','.join(self.downstreams)} {state}>"
