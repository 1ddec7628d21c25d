"""What collectors produce and read from: ``Sample``, ``Sources``, ``Collected``, ``collect``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agentfleet.config import Settings
from agentfleet.redis_handles import BrokerRedis
from agentfleet.registry import WorkerRecord
from agentfleet.runs import RunStore

__all__ = ["Collected", "Collector", "Sample", "Sources", "collect"]


@dataclass(frozen=True)
class Sample:
    """One value of one metric. ``kind`` is the Prometheus type; ``help`` its HELP text."""

    name: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)
    kind: Literal["gauge", "counter"] = "gauge"
    help: str = ""


class Sources(Protocol):
    """What collectors read from."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> RunStore: ...

    @property
    def broker(self) -> BrokerRedis:
        """A Redis client on the broker (its queues and unacknowledged messages)."""
        ...

    def live_workers(self) -> list[WorkerRecord]:
        """The workers whose heartbeat has not expired (``agentfleet.registry``)."""
        ...


Collector = Callable[[Sources], list[Sample]]


@dataclass
class Collected:
    """Every sample of one collection, and the collectors that failed (with the error)."""

    samples: list[Sample]
    errors: dict[str, str]
    at: float = field(default_factory=time.time)

    def values(self, name: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name]

    def one(self, name: str, default: float | None = None) -> float | None:
        found = self.values(name)
        return found[0].value if found else default


def collect(sources: Sources, collectors: Sequence[Collector]) -> Collected:
    """Run every collector; one that raises is reported by name and the others still run."""
    samples: list[Sample] = []
    errors: dict[str, Any] = {}
    for collector in collectors:
        try:
            samples.extend(collector(sources))
        except Exception as exc:  # a broken source must not hide the others
            errors[getattr(collector, "__name__", repr(collector))] = f"{type(exc).__name__}: {exc}"
    return Collected(samples=samples, errors=errors)
