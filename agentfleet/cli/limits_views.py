"""Whose limits ``agentfleet limits show`` reports: the live workers', from their heartbeats.

Each worker's heartbeat carries the limiter configuration it applies (``WorkerRecord.limits``).
Workers that agree form one view; workers configured differently form one view each, most
workers first. With no live worker that reports its limits, the view is this process's own
configuration, and says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentfleet.config import LimitSpec, Settings
from agentfleet.ratelimit import Limiter
from agentfleet.redis_handles import StateRedis
from agentfleet.registry import WorkerRegistry

__all__ = ["LOCAL", "WORKERS", "LimitsView", "limits_views"]

WORKERS = "workers"
LOCAL = "this process"


@dataclass(frozen=True)
class LimitsView:
    """A limiter configured as ``workers`` (node names) apply it; ``source`` says whose it is:
    ``WORKERS`` (from heartbeats) or ``LOCAL`` (this process's configuration, no worker said)."""

    source: str
    workers: tuple[str, ...]
    limiter: Limiter

    @property
    def title(self) -> str:
        if self.source == LOCAL:
            return "limits from this process's configuration (no live worker reports its own)"
        count = len(self.workers)
        who = f"{count} live worker" + ("" if count == 1 else "s")
        return f"limits as {who} use them (from heartbeats: {', '.join(self.workers)})"


def _limiter(settings: Settings, client: StateRedis, config: Mapping[str, Any]) -> Limiter:
    return Limiter(
        client,
        prefix=settings.key_prefix,
        limits={name: LimitSpec(**spec) for name, spec in (config.get("table") or {}).items()},
        default=LimitSpec(**(config.get("default") or {})),
        max_parallelism=config.get("max_parallelism"),
        lease_ttl_s=settings.limiter.lease_ttl_s,
        short_wait_s=settings.limiter.short_wait_s,
    )


def limits_views(settings: Settings, client: StateRedis) -> list[LimitsView]:
    """One view per distinct configuration among the live workers, most workers first; or
    this process's own when no live worker reports one."""
    groups: dict[str, list[str]] = {}
    for record in WorkerRegistry.from_settings(settings, client).live():
        if record.limits:
            groups.setdefault(json.dumps(record.limits, sort_keys=True), []).append(record.node)
    if not groups:
        return [LimitsView(LOCAL, (), Limiter.from_settings(settings, client))]
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    return [
        LimitsView(WORKERS, tuple(nodes), _limiter(settings, client, json.loads(config)))
        for config, nodes in ordered
    ]
