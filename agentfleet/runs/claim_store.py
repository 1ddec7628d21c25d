"""Item claims in Redis: releasing, renewing and checking them.

One part of ``RunStore`` (``runs/store.py``): a delivery takes its claim in ``begin``
(``runs/delivery.py``); the lease renewer keeps it alive through ``renew_claims``
(``runs/claims.py``), one script per cluster slot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentfleet.outages import repeatable
from agentfleet.runs.store_base import StoreBase

__all__ = ["ClaimStore"]


class ClaimStore(StoreBase):
    """Release, renew and check the ``claim`` keys of items."""

    @repeatable
    def release_claim(self, key: str, token: str) -> bool:
        """Give up the claim on ``key`` if ``token`` holds it."""
        return bool(self._scripts["release"](keys=[self.claim_key(key)], args=[token, "exact"]))

    @repeatable
    def release_claim_of(self, key: str, owner_prefix: str) -> bool:
        """Give up the claim on ``key`` if a token starting with ``owner_prefix`` holds it (the
        worker's main process releasing the claim of a pool process that died)."""
        return bool(self._scripts["release"](keys=[self.claim_key(key)], args=[owner_prefix, "prefix"]))

    @repeatable
    def renew_claims(self, held: Mapping[str, str], ttl_s: float) -> dict[str, bool]:
        """Extend each claim ``key -> token`` still held; which ones were (True) or were lost."""
        if not held:
            return {}
        groups: dict[int, list[str]] = {}
        for key in held:
            # One script per cluster slot (one for all on a single Redis).
            slot = self._redis.keyslot(self.claim_key(key)) if self.clustered else 0
            groups.setdefault(slot, []).append(key)
        kept: dict[str, bool] = {}
        for keys in groups.values():
            reply = self._scripts["renew"](
                keys=[self.claim_key(k) for k in keys],
                args=[max(1, int(ttl_s * 1000)), *[held[k] for k in keys]],
            )
            kept.update((k, bool(v)) for k, v in zip(keys, reply, strict=True))
        return kept

    @repeatable
    def live_claims(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key has a live claim now."""
        if not keys:
            return []
        return [v is not None for v in self._mget([self.claim_key(k) for k in keys])]
