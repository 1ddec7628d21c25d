"""Item claims: the token a delivery holds while it runs an item, and the thread that renews them.

A delivery claims its item in ``RunStore.begin`` (``p:claim:{key}``, set only if absent, with a
TTL of ``delivery.claim_ttl_s``). While the body runs, this process's ``ClaimRenewer`` extends
every claim it holds once a third of the TTL has passed, all in one script call per run store.
``RunStore.finish`` (or ``release_claim`` when the item is rescheduled) gives the claim up. A
worker that dies stops renewing, so its claims lapse within the TTL and the reconciler can send
the items again.

A token is ``{worker node}:{pid}:{random}``: the worker's main process can release the claims
of a pool process it saw die by that prefix.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Protocol

__all__ = ["ClaimRenewer", "claim_owner_prefix", "claim_renewer", "new_claim_token"]

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


class ClaimRenewer:
    """Renews this process's claims every third of their TTL from one daemon thread."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._held: dict[tuple[int, str], tuple[ClaimStore, str, float]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, store: ClaimStore, key: str, token: str, ttl_s: float) -> None:
        """Keep renewing the claim on ``key`` until ``drop``."""
        with self._lock:
            self._held[(id(store), key)] = (store, token, ttl_s)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="agentfleet-claims", daemon=True)
                self._thread.start()

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
                ttls = [ttl for _, _, ttl in self._held.values()]
            period = min(ttls, default=30.0) / 3
            self._wake.wait(period)
            self._wake.clear()
            self.renew_now()

    def renew_now(self) -> None:
        """Renew every held claim at once; a claim found lost is dropped and logged."""
        with self._lock:
            groups: dict[int, tuple[ClaimStore, float, dict[str, str]]] = {}
            for (sid, key), (store, token, ttl) in self._held.items():
                group = groups.setdefault(sid, (store, ttl, {}))
                group[2][key] = token
        for sid, (store, ttl, held) in groups.items():
            started = time.monotonic()
            try:
                kept = store.renew_claims(held, ttl)
            except Exception as exc:
                # Redis may be back before the claims lapse: keep them and try at the next turn.
                log.warning("could not renew %d claims: %s", len(held), exc)
                continue
            for key, alive in kept.items():
                if not alive:
                    log.warning("the claim on %s lapsed before its renewal; another copy may run it", key)
                    with self._lock:
                        self._held.pop((sid, key), None)
            if time.monotonic() - started > ttl / 3:
                log.warning("renewing %d claims took longer than a third of their TTL", len(held))


_renewer = ClaimRenewer()


def claim_renewer() -> ClaimRenewer:
    """The process's renewer. A forked child starts with none of its parent's claims."""
    return _renewer


os.register_at_fork(after_in_child=_renewer._reset)
