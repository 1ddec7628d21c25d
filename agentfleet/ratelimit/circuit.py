"""Circuit breakers per downstream, shared by every worker through Redis.

A downstream's circuit is ``closed`` until, within ``vendor_issue_window_s``, at least
``vendor_issue_failures`` attempts against it failed with a downstream fault (5xx, 529, timeout,
broken connection) and they are at least ``circuit_failure_ratio`` of its attempts. Attempts are
the calls reported (failed or succeeded) or, when callers count them as they start
(``before(..., count_attempt=True)``, as the fleet transport does), the calls started, if more:
a fast failure must not look like the whole story while slower calls started with it are
still on their way. Then it is
``open``: callers are deferred (``Deferred`` with the wait), for ``circuit_cooldown_s``. After
that the first caller gets the probe (``half_open``); the others keep waiting. The probe's
success closes the circuit and forgets the failures; its failure opens it for another
cool-down; a probe that never reports is replaced after ``circuit_probe_ttl_s``.

How callers use it (the fleet transport per request, ``execute`` per attempt)::

    probe = breaker.before("vendor-b.example")        # raises Deferred while open
    try:
        response = send()
    except DownstreamFault:
        breaker.record_failure("vendor-b.example")
        raise
    breaker.record_success("vendor-b.example")        # closes a half-open circuit

Layout under the key prefix ``p`` (names from ``agentfleet.keys``; times are Redis server time,
so worker clocks do not matter; the braces are a Redis Cluster hash tag: a report touches the
downstream's keys and the list of known downstreams at once, so every circuit key lives in one
slot):

- ``{p:cb}:<downstream>``    hash: ``state``, ``opened_at``, ``open_until``, ``probe_until``
- ``{p:cb}:<downstream>:w``  hash: ``f:<bucket>`` / ``s:<bucket>`` / ``a:<bucket>`` failure,
  success and started-call counts, ten buckets per window
- ``{p:cb}:known``           sorted set: downstreams by their last failure or state change

The scripts are ``scripts/circuit/*.lua`` (``window.lua`` in front of each).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from agentfleet.config import DLQSettings, Settings
from agentfleet.errors import Deferred
from agentfleet.keys import CircuitKeys
from agentfleet.lua import ScriptSet
from agentfleet.redis_client import state_client
from agentfleet.redis_handles import StateRedis

__all__ = ["CIRCUIT_LUA", "CLOSED", "HALF_OPEN", "OPEN", "CircuitBreaker", "CircuitStatus"]

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"
BUCKETS_PER_WINDOW = 10
CIRCUIT_LUA = ScriptSet("agentfleet.ratelimit", "scripts/circuit", libraries=("window",))


@dataclass(frozen=True)
class CircuitStatus:
    """One downstream's circuit now. Counts cover the last ``window_s`` seconds; times are Unix times."""

    downstream: str
    state: str
    failures: int
    successes: int
    window_s: float
    opened_at: float | None = None
    open_until: float | None = None
    started: int = 0

    @property
    def failure_ratio(self) -> float:
        """Failures over attempts: calls reported, or calls started if more were counted."""
        total = max(self.failures + self.successes, self.started)
        return self.failures / total if total else 0.0


class CircuitBreaker:
    """Per-downstream circuit breakers in Redis; see the module docstring for the states."""

    def __init__(
        self, client: StateRedis, *, prefix: str = "af", settings: DLQSettings | None = None
    ) -> None:
        # redis-py's reply types are unions of every RESP shape; this class knows each reply.
        self.client: Any = client
        self.keys = CircuitKeys(prefix)
        self.settings = settings or DLQSettings()
        scripts = CIRCUIT_LUA.register(client, "before", "record", "release")
        self._before, self._record, self._release = scripts["before"], scripts["record"], scripts["release"]

    @classmethod
    def from_settings(cls, settings: Settings, client: StateRedis | None = None) -> CircuitBreaker:
        client = client or state_client(settings)
        return cls(client, prefix=settings.key_prefix, settings=settings.dlq)

    # The caller's side ---------------------------------------------------------------------

    def before(
        self, downstream: str, *, probe_ttl_s: float | None = None, count_attempt: bool = False
    ) -> bool:
        """Check the circuit before calling ``downstream``.

        Returns True when this caller holds the half-open probe (report its result with
        ``record_success``/``record_failure``, or ``release_probe``), False when the circuit is
        closed. Raises ``Deferred`` with the seconds to wait (plus a little jitter, so waiting
        callers do not return at once) while it is open or another caller holds the probe.
        ``probe_ttl_s`` (default ``circuit_probe_ttl_s``) bounds how long the probe is held.
        ``count_attempt`` counts a call let through a closed circuit as started, for the
        failure ratio (count each call once: once per request, or once per task attempt).
        """
        s = self.settings
        ttl = probe_ttl_s if probe_ttl_s is not None else s.circuit_probe_ttl_s
        verdict, wait = self._before(
            keys=[self.keys.circuit(downstream), self.keys.window(downstream)],
            args=[ttl, int(count_attempt), s.vendor_issue_window_s, BUCKETS_PER_WINDOW],
        )
        if verdict == "wait":
            wait_s = min(float(wait), self.settings.circuit_cooldown_s)
            wait_s += random.uniform(0.0, min(1.0, 0.1 * self.settings.circuit_cooldown_s))
            raise Deferred(wait_s, f"the circuit for {downstream} is open", downstream=downstream)
        return verdict == "probe"

    def record_success(self, downstream: str) -> str:
        """Count a successful call; closes a half-open circuit. Returns the state after it."""
        return self._report("s", downstream)

    def record_failure(self, downstream: str) -> str:
        """Count a failed call (a downstream fault); may open the circuit. Returns the state after it."""
        return self._report("f", downstream)

    def release_probe(self, downstream: str) -> None:
        """Give the probe back without a verdict (the call never reached the downstream)."""
        self._release(keys=[self.keys.circuit(downstream)])

    def _report(self, kind: str, downstream: str) -> str:
        s = self.settings
        state, _, _ = self._record(
            keys=[self.keys.circuit(downstream), self.keys.window(downstream), self.keys.known],
            args=[
                kind,
                s.vendor_issue_window_s,
                BUCKETS_PER_WINDOW,
                s.vendor_issue_failures,
                s.circuit_failure_ratio,
                s.circuit_cooldown_s,
                downstream,
            ],
        )
        return str(state)

    # The operator's side -------------------------------------------------------------------

    def state(self, downstream: str) -> CircuitStatus:
        """``downstream``'s circuit and its counts in the current window."""
        return self._statuses([downstream])[0]

    def statuses(self) -> list[CircuitStatus]:
        """Every downstream with failures in the window or a circuit that is not closed."""
        names = list(self.client.zrange(self.keys.known, 0, -1))
        found = self._statuses(names)
        idle = [s.downstream for s in found if s.state == CLOSED and not s.failures]
        if idle:
            self.client.zrem(self.keys.known, *idle)
        return [s for s in found if s.state != CLOSED or s.failures]

    def open_circuits(self) -> list[CircuitStatus]:
        """The downstreams whose circuit is open or half-open."""
        return [s for s in self.statuses() if s.state != CLOSED]

    def vendor_issues(self) -> list[CircuitStatus]:
        """Downstreams over the vendor-issue threshold in the window, or with a circuit not closed."""
        s = self.settings
        return [
            c
            for c in self.statuses()
            if c.state != CLOSED
            or (c.failures >= s.vendor_issue_failures and c.failure_ratio >= s.circuit_failure_ratio)
        ]

    def reset(self, downstream: str) -> None:
        """Close ``downstream``'s circuit and forget its counts (an operator's override)."""
        self.client.delete(self.keys.circuit(downstream), self.keys.window(downstream))

    def _statuses(self, names: list[str]) -> list[CircuitStatus]:
        if not names:
            return []
        window = self.settings.vendor_issue_window_s
        seconds, micros = self.client.time()
        current = int((seconds + micros / 1e6) // (window / BUCKETS_PER_WINDOW))
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(self.keys.circuit(name))
            pipe.hgetall(self.keys.window(name))
        replies = pipe.execute()
        found = []
        for i, name in enumerate(names):
            record, buckets = replies[2 * i], replies[2 * i + 1]
            counts = {"f": 0, "s": 0, "a": 0}
            for field, count in buckets.items():
                if int(field[2:]) > current - BUCKETS_PER_WINDOW and field[0] in counts:
                    counts[field[0]] += int(count)
            opened = float(record["opened_at"]) if record.get("opened_at") else None
            until = float(record["open_until"]) if record.get("open_until") else None
            found.append(
                CircuitStatus(
                    downstream=name,
                    state=record.get("state", CLOSED),
                    failures=counts["f"],
                    successes=counts["s"],
                    window_s=window,
                    opened_at=opened,
                    open_until=until,
                    started=counts["a"],
                )
            )
        return found
