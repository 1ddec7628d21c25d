"""Finding the broker for a command: the configured Redis, or an embedded cluster.

A broker set in ``AGENTFLEET_BROKER_URL`` or ``agentfleet.toml`` is used, or the command
fails saying why (refused password, nothing answering): it is never replaced by another. Only
when nothing is configured and nothing answers on the default address do the commands that
run work start an embedded Redis, and they say so.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agentfleet.broker_check import check_broker
from agentfleet.config import Settings, get_settings
from agentfleet.embedded_redis import redis_reachable
from agentfleet.local import LocalCluster
from agentfleet.orchestration import Fleet
from agentfleet.redis_client import mask_url

__all__ = ["broker_configured", "fleet_for_work", "importable_module_of", "local_task", "require_broker"]


def broker_configured(settings: Settings) -> bool:
    """True when ``broker_url`` was set (environment or ``agentfleet.toml``), not defaulted."""
    return "broker_url" in settings.model_fields_set


def require_broker() -> str:
    """The broker URL once its Redis answers; else one error saying what is wrong with it."""
    settings = get_settings()
    check_broker(settings.redis_target())
    return settings.broker_url


def importable_module_of(task_name: str) -> str | None:
    """The module a dotted task name lives in, when this process can find it."""
    module, _, _ = task_name.rpartition(".")
    if not module:
        return None
    try:
        return module if importlib.util.find_spec(module) is not None else None
    except (ImportError, ValueError):
        return None


def local_task(task_name: str, say: Callable[[str], object]) -> Any:
    """The fleet task object of ``task_name`` when this process can import its module, so its
    inputs are validated against their types as ``Fleet.map`` does with a task object; else
    ``task_name`` itself (then only the parameter names the workers registered are checked,
    and ``say`` is told why)."""
    module = importable_module_of(task_name)
    if module is None:
        return task_name
    try:
        importlib.import_module(module)
    except Exception as exc:
        say(
            f"note: {module} does not import here ({type(exc).__name__}: {exc}); inputs are checked "
            "against the parameter names the workers registered, not their types"
        )
        return task_name
    from agentfleet.celery_app import app
    from agentfleet.protocol.task import FleetTask

    task = app.tasks.get(task_name)
    return task if isinstance(task, FleetTask) else task_name


@contextmanager
def fleet_for_work(
    *,
    workers: int,
    concurrency: int | None,
    pool: str | None,
    task_modules: list[str] | None = None,
    say: Callable[[str], object] | None = None,
) -> Iterator[tuple[Fleet, LocalCluster | None]]:
    """A fleet on the configured Redis and its workers; else an embedded cluster of our own
    whose workers also import ``task_modules``.

    ``say`` is called with one line describing what was started, when anything was.
    """
    settings = get_settings()
    if broker_configured(settings) or redis_reachable(settings.broker_url):
        fleet = Fleet(broker_url=require_broker())
        try:
            yield fleet, None
        finally:
            fleet.close()
        return
    with LocalCluster(
        workers=workers, concurrency=concurrency, pool=pool, task_modules=task_modules or ()
    ) as cluster:
        if say is not None:
            say(
                f"No Redis configured (AGENTFLEET_BROKER_URL) and none on {mask_url(settings.broker_url)}: "
                f"started an embedded Redis at {mask_url(cluster.broker_url)} and {workers} worker processes "
                f"({cluster.pool} pool, concurrency {cluster.concurrency}); they stop when this command ends."
            )
        yield cluster.fleet(), cluster
