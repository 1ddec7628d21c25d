"""``agentfleet worker``: a Celery worker with agentfleet's defaults."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import typer
from pydantic import ValidationError

from agentfleet.config import Settings, WorkerSettings, get_settings
from agentfleet.errors import ConfigError

__all__ = ["require_task_modules", "resolve_queues", "worker"]

# An autoscaling worker's pool when none is chosen: gevent measured at about 1 MiB per slot
# against about 33 MiB for prefork (bench/pool_choice.py; figures in the README).
AUTOSCALE_POOL = "gevent"


def resolve_queues(spec: str | None) -> str:
    """Comma-separated queues; the roles ``agents``, ``fanin`` and ``maintenance`` name the
    configured queues. None means every queue."""
    named = get_settings().queues.model_dump()
    if not spec:
        return ",".join(named.values())
    parts = [part.strip() for part in spec.split(",") if part.strip()]
    return ",".join(named.get(part, part) for part in parts)


#: Seconds a task module's trial import may take before the worker starts all the same.
IMPORT_CHECK_S = 60.0


def _findable(module: str) -> str | None:
    """None when ``module`` can be imported from here; else why not, in one line."""
    try:
        if importlib.util.find_spec(module) is None:
            return "no such module"
    except (ImportError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return _imports(module)


def _imports(module: str) -> str | None:
    """The last line of what importing ``module`` raised, tried in a child process (a gevent
    worker must patch before the module's own imports run, so this process imports nothing)."""
    probe = "import importlib, sys; importlib.import_module(sys.argv[1])"
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe, module], capture_output=True, text=True, timeout=IMPORT_CHECK_S
        )
    except subprocess.TimeoutExpired:
        return None  # slow, not broken: Celery imports it and says what it finds
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"its import exited with status {done.returncode}"


def require_task_modules(modules: list[str]) -> None:
    """One ``ConfigError`` naming the task modules this process cannot import, before Celery
    tries (and stops with a traceback)."""
    missing = {module: why for module in modules if (why := _findable(module)) is not None}
    if not missing:
        return
    named = ", ".join(f"{module} ({why})" for module, why in missing.items())
    path = os.environ.get("PYTHONPATH") or "unset"
    raise ConfigError(
        f"cannot import the task module {named}, named in AGENTFLEET_TASK_MODULES "
        f"({','.join(modules)}); install it, or add its directory to PYTHONPATH (now {path}), "
        "then start the worker again"
    )


def worker(
    ctx: typer.Context,
    pool: str | None = typer.Option(
        None, help="prefork, threads, gevent or solo (default from settings).", metavar="POOL"
    ),
    concurrency: int | None = typer.Option(
        None, "--concurrency", "-c", min=1, help="Pool size.", metavar="N"
    ),
    autoscale: str | None = typer.Option(
        None,
        help="'max,min' pool sizes; prefork or gevent (gevent unless --pool says otherwise).",
        metavar="MAX,MIN",
    ),
    queues: str | None = typer.Option(
        None,
        "--queues",
        "-Q",
        help="Comma-separated queues or roles (agents, fanin, maintenance); default: all.",
        metavar="QUEUES",
    ),
    log_level: str = typer.Option("INFO", "--log-level", "-l", help="Log level.", metavar="LEVEL"),
    old_log_level: str | None = typer.Option(
        None, "--loglevel", hidden=True, help="Old spelling of --log-level."
    ),
    hostname: str | None = typer.Option(
        None, "--hostname", "-n", help="Node name, e.g. agents1@%h.", metavar="NAME"
    ),
) -> None:
    """Start a worker on the configured broker.

    It runs celery -A agentfleet.celery_app worker with the queues and pool given.

    Any further option is Celery's and is passed on, e.g. --max-tasks-per-child 100.
    """
    settings = get_settings()
    require_task_modules(settings.task_modules)
    chosen_pool, autoscale = _pool_and_autoscale(settings, pool, autoscale)
    slots = int(autoscale.split(",")[0]) if autoscale else (concurrency or settings.worker.concurrency)
    _check_connections(settings, slots)
    argv = ["-m", "celery", "-A", "agentfleet.celery_app", "worker", "--pool", chosen_pool]
    argv += ["--loglevel", old_log_level or log_level, "--task-events", "--queues", resolve_queues(queues)]
    if autoscale:
        argv += ["--autoscale", autoscale]
    else:
        argv += ["--concurrency", str(concurrency or settings.worker.concurrency)]
    if hostname:
        argv += ["--hostname", hostname]
    argv += ctx.args
    # Replace this process with Celery's own command, so a gevent pool is patched before any
    # import and signals reach the worker directly.
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, *argv])


def _pool_and_autoscale(
    settings: Settings, pool: str | None, autoscale: str | None
) -> tuple[str, str | None]:
    """The pool and the ``max,min`` autoscale sizes (None: a fixed pool) the worker runs with,
    from the flags and the settings; ``BadParameter`` for an autoscale a pool cannot do."""
    if autoscale is not None:
        try:
            autoscale = WorkerSettings(autoscale=autoscale).autoscale
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise typer.BadParameter(problem, param_hint="--autoscale") from None
    autoscale = autoscale or settings.worker.autoscale
    chosen_pool = pool or settings.worker.pool
    if autoscale and pool is None and chosen_pool not in ("prefork", "gevent"):
        chosen_pool = AUTOSCALE_POOL
    if autoscale and chosen_pool not in ("prefork", "gevent"):
        raise typer.BadParameter("--autoscale needs --pool prefork or gevent", param_hint="--autoscale")
    return chosen_pool, autoscale


def _check_connections(settings: Settings, slots: int) -> None:
    """``BadParameter`` unless the broker's connection pool outnumbers ``slots``."""
    if slots >= settings.broker_max_connections:
        raise typer.BadParameter(
            f"a pool of {slots} needs AGENTFLEET_BROKER_MAX_CONNECTIONS above {slots} "
            f"(it is {settings.broker_max_connections}): each busy slot may hold a Redis connection",
            param_hint="--concurrency / --autoscale",
        )
