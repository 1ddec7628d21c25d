"""How often a sandbox's refused requests reach the audit stream and the worker's log.

A program that retries a refused request in a loop must not turn each refusal into a Redis
write and a log line. ``RefusalTally`` counts refusals per kind (destination and reason): the
first ``at_once`` of a kind are audited one by one, later ones at most once per
``every_s`` seconds per kind, each such entry carrying how many refusals it stands for
(``repeats``); what is still counted when the sandbox closes is written then. The log gets
the first ``at_once`` of a kind, then every hundredth.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

__all__ = ["Decision", "Pending", "RefusalTally"]


@dataclass(frozen=True)
class Decision:
    """What to do with one refusal: ``audit`` it now as ``repeats`` refusals (0: not now),
    ``log`` it; ``count`` is how many of its kind so far."""

    repeats: int
    log: bool
    count: int


@dataclass
class Pending:
    """Refusals of one kind counted but not audited yet."""

    destination: str
    why: str
    domain: str
    credential: str
    repeats: int


@dataclass
class _Kind:
    domain: str
    credential: str
    count: int = 0
    pending: int = 0
    audited_at: float = float("-inf")


class RefusalTally:
    """Refusals of one sandbox, by kind (see the module docstring)."""

    def __init__(self, *, at_once: int = 5, every_s: float = 1.0) -> None:
        self._at_once = at_once
        self._every_s = every_s
        self._kinds: dict[tuple[str, str], _Kind] = {}
        self._lock = threading.Lock()

    def note(
        self, destination: str, why: str, *, domain: str = "", credential: str = "", now: float | None = None
    ) -> Decision:
        """Count one refusal of ``destination`` for ``why``; what to do with it. ``now`` is
        monotonic seconds (the clock when None)."""
        moment = time.monotonic() if now is None else now
        with self._lock:
            kind = self._kinds.setdefault((destination, why), _Kind(domain, credential))
            kind.count += 1
            kind.pending += 1
            repeats = 0
            if kind.count <= self._at_once or moment - kind.audited_at >= self._every_s:
                repeats, kind.pending, kind.audited_at = kind.pending, 0, moment
            return Decision(repeats, kind.count <= self._at_once or kind.count % 100 == 0, kind.count)

    def drain(self) -> list[Pending]:
        """Each kind's refusals counted but not audited yet; they count as audited from here on."""
        with self._lock:
            left = [
                Pending(dest, why, kind.domain, kind.credential, kind.pending)
                for (dest, why), kind in self._kinds.items()
                if kind.pending
            ]
            for kind in self._kinds.values():
                kind.pending = 0
            return left
