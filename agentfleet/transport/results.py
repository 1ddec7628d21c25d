"""The Celery app a ``Fleet`` sends with: the workers' configuration, minus result listening.

Celery builds an app's result backend in the private ``Celery._get_backend``; ``DispatchApp``
builds one that never subscribes there (feature ``quiet_results`` of ``internals``). Where a
Celery release no longer has that method, ``dispatch_app_class`` gives Celery's own app.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.backends.redis import RedisBackend, SentinelBackend

from agentfleet.transport.internals import enabled

__all__ = ["DispatchApp", "dispatch_app_class"]


class _DispatchOnly:
    """A Redis result backend that does not subscribe to every task it sends.

    Celery's Redis backend subscribes to each sent task's result channel so that ``.get()``
    is quick. A ``Fleet`` follows outcomes through the run store instead, so those thousands
    of subscriptions would be pure cost.
    """

    def on_task_call(self, producer: Any, task_id: str) -> None:
        return None

    def add_pending_result(self, result: Any, weak: bool = False, start_drainer: bool = True) -> Any:
        return result

    def remove_pending_result(self, result: Any) -> Any:
        return result


class _DispatchOnlyBackend(_DispatchOnly, RedisBackend):
    pass


class _DispatchOnlySentinelBackend(_DispatchOnly, SentinelBackend):
    pass


class DispatchApp(Celery):
    """The client-side app: sends tasks by name; never waits on results."""

    def _get_backend(self) -> RedisBackend:
        url = str(self.conf.result_backend)
        cls = _DispatchOnlySentinelBackend if url.startswith("sentinel://") else _DispatchOnlyBackend
        return cls(app=self, url=url)


def dispatch_app_class() -> type[Celery]:
    """The app class a ``Fleet`` sends with: ``DispatchApp``, or Celery's own when the method it
    overrides is gone (each sent task is then subscribed to, as by any Celery client)."""
    return DispatchApp if enabled("quiet_results") else Celery
