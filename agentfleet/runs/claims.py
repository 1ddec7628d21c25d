"""Item claims: the token a delivery holds while it runs an item, and the thread that renews them.

A delivery claims its item in ``RunStore.begin`` (``p:claim:{key}``, set only if absent, with a
TTL of ``delivery.claim_ttl_s``). While the body runs, this process's ``ClaimRenewer`` extends
every claim it holds once a third of the TTL has passed, all in one script call per run store.
``RunStore.finish`` (or ``release_claim`` when the item is rescheduled) gives the claim up. A
worker that dies stops renewing, so its claims lapse within the TTL and the reconciler can send
the items again.

Each claim held is a ``Claim``: what this process knows of it. It is lost for good once a
renewal finds it gone (it lapsed, or another delivery took it), and presumed lost once no
renewal was confirmed for a whole TTL (from then on another delivery may hold it: a worker cut
off from Redis learns it from its own clock). The execution's ``TaskContext`` asks it before
each of the fleet's own calls. A renewal that finds gone a claim whose delivery is finishing
(its finish released it, or is deciding) is not a loss worth a warning.

A token is ``{worker node}:{pid}:{random}``: the worker's main process can release the claims
of a pool process it saw die by that prefix.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Protocol

from agentfleet.errors import ClaimLost

__all__ = ["Claim", "ClaimRenewer", "claim_owner_prefix", "claim_renewer", "new_claim_token"]

log = logging.getLogger("agentfleet.claims")


class ClaimStore(Protocol):
    """What the renewer needs of a run store."""

    def renew_claims(self, held: dict[str, str], ttl_s: float) -> dict[str, bool]: ...


def claim_owner_prefix(node: str, pid: int | None = None) -> str:
    """The start of every token the process ``pid`` (default: this one) of worker ``node`` makes."""
    return f"{node}:{os.getpid() if pid is None else pid}:"


def new_claim_token(node: str) -> str:
    """A fresh claim token for a delivery in this process of worker ``node``."""
    return claim_owner_prefix(node) + os.urandom(6).hex()


class Claim:
    """One delivery's claim on item ``key`` under ``token``, as this process knows it.

    ``confirmed_at`` is the ``time.monotonic()`` at which the call that set or last extended
    the claim was sent: Redis ran it no earlier, so the claim lives at least ``ttl_s`` seconds
    beyond. Safe to share between threads.
    """

    __slots__ = ("_lost", "_until", "finishing", "key", "token", "ttl_s")

    def __init__(self, key: str, token: str, ttl_s: float, *, confirmed_at: float | None = None) -> None:
        self.key = key
        self.token = token
        self.ttl_s = ttl_s
        self._until = (time.monotonic() if confirmed_at is None else confirmed_at) + ttl_s
        self._lost = ""
        #: Set when the delivery starts storing its outcome: a renewal finding the claim gone
        #: from then on is the finish's doing, not a loss.
        self.finishing = False

    def confirm(self, sent_at: float) -> None:
        """A renewal sent at ``sent_at`` (``time.monotonic()``) found the claim held and extended it."""
        self._until = max(self._until, sent_at + self.ttl_s)

    def lose(self, why: str) -> None:
        """Mark the claim lost for good, saying ``why``."""
        if not self._lost:
            self._lost = why

    @property
    def lost(self) -> bool:
        """True once the claim is gone, or may be: no renewal confirmed for ``ttl_s`` seconds."""
        if not self._lost and time.monotonic() >= self._until:
            self.lose(f"no renewal of it reached Redis for {self.ttl_s:g} s (its TTL)")
        return bool(self._lost)

    def check(self) -> None:
        """Raise ``ClaimLost`` once the claim is lost (see ``lost``)."""
        if self.lost:
            raise ClaimLost(f"this execution no longer holds the claim on its item: {self._lost}")


class ClaimRenewer:
    """Renews this process's claims every third of their TTL from one daemon thread."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._held: dict[tuple[int, str], tuple[ClaimStore, Claim]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        # ``time.monotonic()`` of the last renewal (or of the first claim held after none).
        self._renewed_at = time.monotonic()

    def hold(
        self, store: ClaimStore, key: str, token: str, ttl_s: float, *, confirmed_at: float | None = None
    ) -> Claim:
        """Keep renewing the claim on ``key`` until ``drop``; ``confirmed_at``: when the call
        that took it was sent (``time.monotonic()``, default now)."""
        claim = Claim(key, token, ttl_s, confirmed_at=confirmed_at)
        with self._lock:
            shortest = min((held.ttl_s for _, held in self._held.values()), default=None)
            self._held[(id(store), key)] = (store, claim)
            if shortest is None:
                # The first claim after none: the renewer was idle; its turns start from now.
                self._renewed_at = time.monotonic()
            if shortest is None or ttl_s < shortest:
                self._wake.set()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="agentfleet-claims", daemon=True)
                self._thread.start()
        return claim

    def drop(self, store: ClaimStore, key: str) -> None:
        """Stop renewing the claim on ``key`` (it was released, or its delivery ended)."""
        with self._lock:
            self._held.pop((id(store), key), None)

    def held(self) -> int:
        """How many claims this process is renewing."""
        with self._lock:
            return len(self._held)

    def _loop(self) -> None:
        while True:
            with self._lock:
                shortest = min((claim.ttl_s for _, claim in self._held.values()), default=None)
                wait_s = None if shortest is None else self._renewed_at + shortest / 3 - time.monotonic()
            if wait_s is None or wait_s > 0:
                # Idle until a claim is held, else until the next turn; a claim with a shorter
                # TTL than any held wakes the loop to count its turn afresh.
                self._wake.wait(wait_s)
                self._wake.clear()
                continue
            with self._lock:
                self._renewed_at = time.monotonic()
            self.renew_now()

    def renew_now(self) -> None:
        """Renew every held claim at once; a claim found lost is dropped, marked and logged."""
        with self._lock:
            groups: dict[int, tuple[ClaimStore, float, dict[str, Claim]]] = {}
            for (sid, key), (store, claim) in self._held.items():
                group = groups.setdefault(sid, (store, claim.ttl_s, {}))
                group[2][key] = claim
        for sid, (store, ttl, claims) in groups.items():
            sent = time.monotonic()
            try:
                kept = store.renew_claims({key: claim.token for key, claim in claims.items()}, ttl)
            except Exception as exc:
                # Redis may be back before the claims lapse: keep them and try at the next turn.
                log.warning("could not renew %d claims: %s", len(claims), exc)
                continue
            for key, alive in kept.items():
                if alive:
                    claims[key].confirm(sent)
                else:
                    self._gone(sid, claims[key])
            if time.monotonic() - sent > ttl / 3:
                log.warning("renewing %d claims took longer than a third of their TTL", len(claims))

    def _gone(self, sid: int, claim: Claim) -> None:
        with self._lock:
            current = self._held.get((sid, claim.key))
            ours = current is not None and current[1] is claim
            if ours:
                del self._held[(sid, claim.key)]
        if not ours or claim.finishing:
            # Dropped or released by its own delivery while the renewal was on its way.
            return
        claim.lose("it lapsed before its renewal, or another delivery holds it")
        log.warning(
            "the claim on %s lapsed before its renewal; another copy may run it, and this one "
            "stops at its next fleet call",
            claim.key,
        )


_renewer = ClaimRenewer()


def claim_renewer() -> ClaimRenewer:
    """The process's renewer. A forked child starts with none of its parent's claims."""
    return _renewer


os.register_at_fork(after_in_child=_renewer._reset)
