"""How long to wait before the next attempt: exponential backoff with full jitter."""

from __future__ import annotations

import random

__all__ = ["backoff_s", "deferral_s"]

# A floor given by a downstream (retry-after, a pause, a bucket's refill) is exceeded by up to
# this fraction of itself, and by at most _SPREAD_CAP_S seconds.
_SPREAD_FRACTION = 0.1
_SPREAD_CAP_S = 1.0


def _past_floor(floor_s: float, draw: float) -> float:
    return floor_s + draw * min(_SPREAD_CAP_S, _SPREAD_FRACTION * floor_s)


def backoff_s(
    attempt: int,
    *,
    base_s: float,
    cap_s: float,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """Seconds before retry number ``attempt + 1`` (``attempt`` is 0 after the first failure).

    Full jitter: a draw from ``[0, min(cap_s, base_s * 2**attempt)]``, which spreads a crowd
    of failures apart. A downstream's ``retry_after_s`` is a floor: the wait is that long plus
    up to 10% (at most 1 s) so the crowd does not return in the same millisecond.
    """
    draw = (rng or random).random
    if retry_after_s is not None and retry_after_s > 0:
        return _past_floor(retry_after_s, draw())
    ceiling = min(cap_s, base_s * (2 ** max(0, attempt)))
    return draw() * ceiling


def deferral_s(wait_s: float, *, rng: random.Random | None = None) -> float:
    """Seconds before a deferred task comes back, when the limiter said ``wait_s`` seconds.

    Never sooner than ``wait_s``, and up to 10% later (at most 1 s): every task deferred by
    one pause would otherwise return in the same instant it ends.
    """
    return _past_floor(max(0.0, wait_s), (rng or random).random())
