"""Worker process hooks: the worker runtime built when a process starts (fresh Redis pools in
a forked pool process) and torn down when it stops (``tasks/runtime.py``), its reconciler and
heartbeat started in the main process once the worker is ready, exit when the parent is gone,
only redacted user inputs in the argument reprs of the messages a worker publishes, the
quick repr of outcomes (``transport.result_repr``), and the dead-letter queue as the receiver
of queue entries the worker cannot decode or deliver (``tasks.malformed``)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from celery.signals import (
    before_task_publish,
    task_revoked,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)

from agentfleet.protocol.reprs import redact_published_reprs
from agentfleet.redis_client import reset_connections
from agentfleet.tasks.process_logging import process_redactor
from agentfleet.tasks.runtime import close_runtimes, runtime
from agentfleet.transport.result_repr import install as install_result_repr

__all__ = ["PARENT_PID_ENV"]

PARENT_PID_ENV = "AGENTFLEET_PARENT_PID"
log = logging.getLogger("agentfleet.worker")


def _warm_imports() -> None:
    # The Anthropic SDK takes seconds to import; pay that at start, not in the first task.
    try:
        import anthropic  # noqa: F401
        import httpx2  # noqa: F401
    except ImportError:  # pragma: no cover - runtime dependencies
        log.warning("could not preload the Anthropic SDK", exc_info=True)


def _llm_configured() -> bool:
    from agentfleet.config import get_settings

    llm = get_settings().llm
    return bool(llm.base_url or llm.api_key or os.environ.get("ANTHROPIC_API_KEY"))


def _warm_in_background() -> None:
    # Only where LLM calls are configured: every prefork child would otherwise carry the SDK.
    if _llm_configured():
        threading.Thread(target=_warm_imports, name="agentfleet-warm-imports", daemon=True).start()


@worker_process_init.connect
def _on_process_start(**_: Any) -> None:
    # A prefork pool process starts: its own sockets (a forked child must not share its
    # parent's), then its own runtime.
    reset_connections()
    rt = runtime()
    _warm_in_background()
    if rt.settings.sandbox.warm:
        rt.sandboxes().fill_in_background()


def _watch_parent(parent_pid: int, interval_s: float) -> None:
    while True:
        time.sleep(interval_s)
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            log.warning("parent process %d is gone; shutting this worker down", parent_pid)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        except PermissionError:
            return


@worker_shutdown.connect
@worker_process_shutdown.connect
def _on_shutdown(**_: Any) -> None:
    # A pool process may leave by os._exit, which skips atexit: tear its runtime down here.
    close_runtimes()


@worker_ready.connect
def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    # ``sender`` is the worker's consumer.
    _warm_in_background()
    app = sender.app
    node = str(getattr(sender, "hostname", None) or "worker")
    pool = getattr(sender, "pool", None)
    runtime().start_services(app, node, sorted(app.amqp.queues.consume_from), pool=pool)
    # LocalCluster sets the variable so a worker never outlives the process that started it.
    raw = os.environ.get(PARENT_PID_ENV)
    if raw and raw.isdigit():
        threading.Thread(
            target=_watch_parent, args=(int(raw), 1.0), name="agentfleet-parent-watchdog", daemon=True
        ).start()


def _show_only_user_inputs(body: Any = None, headers: dict[str, Any] | None = None, **_: Any) -> None:
    # Retries, deferrals and next stages are published here: Celery's default reprs would
    # show the _af block and every input. The redactor is the process's (rebuilt each second).
    redact_published_reprs(body, headers, process_redactor())


def _receive_malformed(worker: Any) -> None:
    # Queue entries this worker cannot decode or deliver go to the dead-letter queue.
    from agentfleet.config import get_settings
    from agentfleet.tasks.malformed import install_receiver

    app = getattr(worker, "app", None)
    accept = app.conf.accept_content if app is not None else ["json"]
    node = str(getattr(worker, "hostname", None) or socket.gethostname())
    install_receiver(get_settings(), worker=node, accept=accept)


@worker_init.connect
def _on_worker_init(sender: Any = None, **_: Any) -> None:
    # Only in workers: a process that merely imports the built-in tasks keeps Celery's reprs
    # (Fleet passes its own) and reads no settings when it publishes.
    runtime()
    before_task_publish.connect(_show_only_user_inputs, weak=False)
    install_result_repr()
    _receive_malformed(sender)


@task_revoked.connect
def _record_revoked(request: Any = None, **_: Any) -> None:
    # A revoked item never runs its body; count it as cancelled so its run still completes.
    from agentfleet.protocol.meta import META_KWARG, ItemMeta
    from agentfleet.tasks.item import cancelled_outcome

    raw = (getattr(request, "kwargs", None) or {}).get(META_KWARG)
    if not raw:
        return
    meta = ItemMeta.model_validate(raw)
    runtime().runs.finish(cancelled_outcome(meta, str(request.id)), store=False, record=True)
