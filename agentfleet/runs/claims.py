"""Item claims: the token a delivery holds while it runs an item, how they are renewed, locks.

A delivery claims its item in ``RunStore.begin`` (``p:claim:{key}``, set only if absent, with a
TTL of ``delivery.claim_ttl_s``). While the body runs, the process's ``ClaimRenewer`` extends
every claim it holds once a third of the TTL has passed, all in one script call per run store,
from the process's one lease renewer (``agentfleet.leases``, shared with the limiter's permits).
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

A lock is a claim too, on a name instead of an item (``take_lock``): the reconciler's (one
worker acts at a time) and each run's compensation (two copies never undo at once).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Protocol

from agentfleet.errors import ClaimLost
from agentfleet.leases import LeaseRenewer

if TYPE_CHECKING:
    from agentfleet.runs.store import RunStore

__all__ = ["Claim", "ClaimRenewer", "claim_owner_prefix", "new_claim_token", "take_lock"]

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
    """The claims this process holds, renewed together every third of their TTL.

    It is one lease of ``leases`` (a ``LeaseRenewer``, whose thread renews it when due; by
    default one of its own): however many claims are held, one renewal per turn and run store.
    """

    def __init__(self, leases: LeaseRenewer | None = None) -> None:
        self.leases = leases if leases is not None else LeaseRenewer()
        self._held: dict[tuple[int, str], tuple[ClaimStore, Claim]] = {}
        # How many held claims have each TTL (a process uses one or two): the shortest is found
        # without a look at every claim, so holding and dropping stay O(1) with thousands held.
        self._ttls: Counter[float] = Counter()
        self._lock = threading.Lock()
        # The shortest TTL held (None: nothing held), and ``time.monotonic()`` of the last
        # renewal (or of the first claim held after none): the next turn is a third of it on.
        self._shortest: float | None = None
        self._renewed_at = time.monotonic()
        self._pid = os.getpid()

    @property
    def renew_due(self) -> float:
        """``time.monotonic()`` of the next turn (infinity while nothing is held)."""
        shortest = self._shortest
        return float("inf") if shortest is None else self._renewed_at + shortest / 3

    def renew(self) -> bool:
        """A turn: renew every held claim (the lease renewer's call). Never lost itself, and
        never raises: a failed turn is logged and the next comes a third of the TTL on."""
        self._renewed_at = time.monotonic()
        try:
            self.renew_now()
        except Exception:
            log.exception("a turn of claim renewals failed; trying again at the next")
        return True

    def hold(
        self, store: ClaimStore, key: str, token: str, ttl_s: float, *, confirmed_at: float | None = None
    ) -> Claim:
        """Keep renewing the claim on ``key`` until ``drop``; ``confirmed_at``: when the call
        that took it was sent (``time.monotonic()``, default now)."""
        claim = Claim(key, token, ttl_s, confirmed_at=confirmed_at)
        with self._lock:
            shortest = self._shortest
            if shortest is None:
                # The first claim after none: the renewer was idle; its turns start from now.
                self._renewed_at = time.monotonic()
            self._forget((id(store), key))
            self._held[(id(store), key)] = (store, claim)
            self._ttls[ttl_s] = self._ttls.get(ttl_s, 0) + 1
            self._shortest = ttl_s if shortest is None else min(ttl_s, shortest)
            # The next turn comes sooner only for the first claim after none or a shorter TTL
            # (or in a process forked since: its lease renewer starts with nothing tracked).
            sooner = shortest is None or ttl_s < shortest or self._pid != os.getpid()
        if sooner:
            # Outside the lock: the lease renewer reads ``renew_due`` under its own.
            self.leases.track(self)
        return claim

    def drop(self, store: ClaimStore, key: str) -> None:
        """Stop renewing the claim on ``key`` (it was released, or its delivery ended)."""
        with self._lock:
            self._forget((id(store), key))

    def _forget(self, held: tuple[int, str]) -> None:
        # Under the lock: stop holding ``held`` (if held) and work out the shortest TTL left.
        found = self._held.pop(held, None)
        if found is None:
            return
        ttl_s = found[1].ttl_s
        left = self._ttls[ttl_s] - 1
        if left > 0:
            self._ttls[ttl_s] = left
        else:
            # The last claim of its TTL: the shortest may be another now.
            del self._ttls[ttl_s]
            self._shortest = min(self._ttls, default=None)

    def held(self) -> int:
        """How many claims this process is renewing."""
        with self._lock:
            return len(self._held)

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
                self._forget((sid, claim.key))
        if not ours or claim.finishing:
            # Dropped or released by its own delivery while the renewal was on its way.
            return
        claim.lose("it lapsed before its renewal, or another delivery holds it")
        log.warning(
            "the claim on %s lapsed before its renewal; another copy may run it, and this one "
            "stops at its next fleet call",
            claim.key,
        )


def take_lock(store: RunStore, name: str, token: str, ttl_s: float) -> bool:
    """Hold the lock ``name`` (a claim on that name) under ``token`` for ``ttl_s`` seconds:
    extend it when ``token`` holds it already, else take it if it is free; False while another
    token holds it. ``RunStore.release_claim(name, token)`` gives it back; a holder that dies
    loses it ``ttl_s`` after its last extension."""
    if store.renew_claims({name: token}, ttl_s).get(name):
        return True
    return bool(store.client.set(store.claim_key(name), token, nx=True, px=max(1, int(ttl_s * 1000))))
