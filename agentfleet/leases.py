"""One daemon thread that keeps live leases from expiring while their holders work.

A lease is anything with a due time and a way to renew itself (``Renewable``): a limiter's
permit (``agentfleet.ratelimit.permit``), which renews its concurrency slots, or the item
claims a worker process holds (``agentfleet.runs.claims.ClaimRenewer``), renewed together in
one call. Each is renewed when it falls due (a third of its TTL after it was taken or last
renewed). Leases are held weakly: a permit dropped without ``release()`` stops being renewed,
so its slot comes back after the TTL instead of leaking for the life of the process.

A worker process has one (its runtime's, ``agentfleet.tasks.runtime``), shared by its claims
and its permits: one thread, however many leases. A renewer carried into a forked child starts
afresh there at its first ``track`` (the pid tells it apart): none of its parent's leases, no
thread, a lock of its own, so a child never renews what its parent holds.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Protocol

from agentfleet.errors import AgentfleetError

__all__ = ["LeaseRenewer", "Renewable"]

log = logging.getLogger("agentfleet.ratelimit")


class Renewable(Protocol):
    """What the renewer needs of a lease."""

    @property
    def renew_due(self) -> float:
        """``time.monotonic()`` at which the lease should next be renewed."""
        ...

    def renew(self) -> bool:
        """Extend the lease and move ``renew_due`` on, even on failure; False if it was lost."""
        ...


class LeaseRenewer:
    """Renews every tracked lease when it falls due, from one background thread."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._leases: weakref.WeakSet[Renewable] = weakref.WeakSet()
        self._wake = threading.Condition()
        self._wake_at = float("inf")
        self._thread: threading.Thread | None = None

    def track(self, lease: Renewable) -> None:
        """Renew ``lease`` until ``forget`` is called or it is garbage-collected."""
        if self._pid != os.getpid():
            # Made before a fork: the parent's lock may have been held at the fork.
            self._reset()
        with self._wake:
            self._leases.add(lease)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="agentfleet-lease-renewer", daemon=True
                )
                self._thread.start()
            if lease.renew_due < self._wake_at:
                self._wake.notify()

    def forget(self, lease: Renewable) -> None:
        """Stop renewing ``lease``."""
        if self._pid != os.getpid():
            return  # a lease of the parent's: this process never renewed it
        with self._wake:
            self._leases.discard(lease)

    def tracked(self) -> int:
        """How many leases are being renewed."""
        return len(self._leases)

    def _loop(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                due = [lease for lease in self._leases if lease.renew_due <= now]
                if not due:
                    self._wake_at = min((lease.renew_due for lease in self._leases), default=float("inf"))
                    timeout = None if self._wake_at == float("inf") else self._wake_at - now
                    self._wake.wait(timeout)
                    continue
                self._wake_at = now
            for lease in due:
                self._renew(lease)

    def _renew(self, lease: Renewable) -> None:
        try:
            if not lease.renew():
                self.forget(lease)
                log.warning("a lease expired before it could be renewed; its slot was reused")
        except AgentfleetError as exc:
            log.warning("lease renewal failed, will retry: %s", exc)
        except Exception:
            # One lease's broken client must not stop the renewals of every other lease.
            self.forget(lease)
            log.exception("lease renewal failed; no longer renewing this lease")
