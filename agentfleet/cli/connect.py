"""Finding the broker for a command: the configured Redis, or an embedded cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from agentfleet.config import get_settings
from agentfleet.embedded_redis import redis_reachable
from agentfleet.errors import ConfigError
from agentfleet.local import LocalCluster
from agentfleet.orchestration import Fleet
from agentfleet.redis_client import mask_url

__all__ = ["broker_configured", "fleet_for_work", "require_broker"]


def broker_configured() -> bool:
    """True when ``AGENTFLEET_BROKER_URL`` is set, or a Redis answers at the default URL."""
    return bool(os.environ.get("AGENTFLEET_BROKER_URL")) or redis_reachable(get_settings().broker_url)


def require_broker() -> str:
    """The configured broker URL, or one clear error when nothing answers there."""
    url = get_settings().broker_url
    if not redis_reachable(url, timeout_s=2.0):
        raise ConfigError(
            f"no Redis answers at {mask_url(url)}; set AGENTFLEET_BROKER_URL to your Redis "
            "(or run `agentfleet demo`, which starts its own)"
        )
    return url


@contextmanager
def fleet_for_work(
    *, workers: int, concurrency: int | None, pool: str | None, say: object = None
) -> Iterator[tuple[Fleet, LocalCluster | None]]:
    """A fleet on the configured Redis and its workers; else an embedded cluster of our own.

    ``say`` is called with one line describing what was started, when anything was.
    """
    announce = say if callable(say) else (lambda _line: None)
    if broker_configured():
        url = require_broker()
        fleet = Fleet(broker_url=url)
        if not fleet.ping_workers(timeout_s=1.5):
            raise ConfigError(
                f"no workers answer on {mask_url(url)}; start some with `agentfleet worker` "
                "(or unset AGENTFLEET_BROKER_URL to use an embedded cluster)"
            )
        try:
            yield fleet, None
        finally:
            fleet.close()
        return
    with LocalCluster(workers=workers, concurrency=concurrency, pool=pool) as cluster:
        announce(
            f"Started an embedded Redis at {mask_url(cluster.broker_url)} and {workers} worker processes "
            f"({cluster.pool} pool, concurrency {cluster.concurrency})."
        )
        yield cluster.fleet(), cluster
