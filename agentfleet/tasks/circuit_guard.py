"""The circuit breaker as one attempt of a task sees it.

Before the body: ask the task's declared downstream's circuit (raises ``Deferred`` while it is
open; may make this attempt the half-open probe). After it: a success closes a half-open
circuit; a downstream fault counts against the downstream that failed; a probe that ended
without a verdict is given back. Redis trouble here never fails the task: the circuit is
advice, so it fails open and logs.
"""

from __future__ import annotations

import logging

import redis

from agentfleet.errors import AgentfleetError
from agentfleet.ratelimit.circuit import CircuitBreaker

__all__ = ["CircuitGuard"]

log = logging.getLogger("agentfleet.task")


class CircuitGuard:
    """Circuit checks and reports for one attempt of a task that declares ``downstream``."""

    def __init__(self, breaker: CircuitBreaker, downstream: str | None) -> None:
        self.breaker = breaker
        self.downstream = downstream
        self.probe = False
        self.reported: set[str] = set()

    def enter(self) -> None:
        """Raise ``Deferred`` while the declared downstream's circuit is open."""
        if not self.downstream:
            return
        try:
            self.probe = self.breaker.before(self.downstream)
        except redis.RedisError:
            log.warning("circuit of %s unreadable; letting the call through", self.downstream, exc_info=True)

    def succeeded(self) -> None:
        if self.downstream:
            self._report(self.downstream, ok=True)

    def failed(self, err: AgentfleetError, target: str | None) -> None:
        """Count a downstream fault against ``target``; settle this attempt's probe otherwise."""
        settled = False
        if target is not None and target in self.reported:
            # The transport already counted this downstream's answers, request by request.
            err.circuit_recorded = True
        if err.downstream_fault and target and not err.circuit_recorded:
            self._report(target, ok=False)
            err.circuit_recorded = True
            settled = target == self.downstream
        if not self.probe or settled or not self.downstream:
            return
        if err.status_code is not None and not err.downstream_fault:
            # A 4xx is an answer: the downstream is up, whatever was wrong with the request.
            self._report(self.downstream, ok=True)
            return
        try:
            self.breaker.release_probe(self.downstream)
        except redis.RedisError:
            log.warning("could not release the probe of %s", self.downstream, exc_info=True)

    def for_transport(self) -> TransportBreaker:
        """The same circuits, asked per request by the fleet transport during this attempt."""
        return TransportBreaker(self)

    def _report(self, downstream: str, *, ok: bool) -> None:
        try:
            if ok:
                self.breaker.record_success(downstream)
            else:
                self.breaker.record_failure(downstream)
        except redis.RedisError:
            log.warning("could not update the circuit of %s", downstream, exc_info=True)


class TransportBreaker:
    """The circuits as the fleet transport asks them, once per request; fails open like the guard.

    The attempt that holds its declared downstream's half-open probe sends its requests to
    that downstream without asking again, and their answers settle the probe.
    """

    def __init__(self, guard: CircuitGuard) -> None:
        self.guard = guard

    def before(self, downstream: str) -> bool:
        if self.guard.probe and downstream == self.guard.downstream:
            return False
        try:
            # Each request counts as started, so a burst's first fast failures are weighed
            # against every call already on its way, not only against calls that came back.
            return self.guard.breaker.before(downstream, count_attempt=True)
        except redis.RedisError:
            log.warning("circuit of %s unreadable; letting the call through", downstream, exc_info=True)
            return False

    def record_success(self, downstream: str) -> None:
        self.guard.reported.add(downstream)
        self.guard._report(downstream, ok=True)

    def record_failure(self, downstream: str) -> None:
        self.guard.reported.add(downstream)
        self.guard._report(downstream, ok=False)

    def release_probe(self, downstream: str) -> None:
        try:
            self.guard.breaker.release_probe(downstream)
        except redis.RedisError:
            log.warning("could not release the probe of %s", downstream, exc_info=True)
