"""The Celery configuration as pure functions of ``Settings``: importing this reads nothing.

``make_app(settings)`` builds a Celery app configured from ``settings`` (``Fleet`` uses one
to send work to its broker; ``agentfleet.celery_app`` holds the one that workers and beat
load). ``celery_config(settings)`` is the configuration itself, ``beat_schedule(settings)``
every beat entry (each source of entries is one function).

Beat runs with the Redis scheduler (celery-redbeat): its entries live in Redis beside
everything else, and a lock lets only one beat send at a time, so a second beat process
waits instead of running every schedule twice.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

from celery import Celery
from kombu import Queue

from agentfleet.config import Settings
from agentfleet.config.cron import cron_schedule
from agentfleet.config.redis_url import url_password, without_password
from agentfleet.keys import redbeat_prefix
from agentfleet.redis_client import keepalive_options, sentinel_hosts
from agentfleet.transport import broker_transport, consumer_class, enabled

__all__ = [
    "BUILTIN_TASK_MODULES",
    "CONSUMER_STEPS",
    "DIGEST_ENTRY",
    "FLEET_AMQP",
    "RUN_SCHEDULE_TASK",
    "beat_schedule",
    "celery_config",
    "digest_entries",
    "make_app",
    "redbeat_key_prefix",
    "scheduled_fanout_entries",
]

BUILTIN_TASK_MODULES = [
    "agentfleet.tasks.builtin",
    "agentfleet.tasks.compensator",
    "agentfleet.tasks.llm_tasks",
    "agentfleet.tasks.maintenance",
    "agentfleet.orchestration.scheduled",
]
DIGEST_ENTRY = "agentfleet-dlq-digest"
RUN_SCHEDULE_TASK = "agentfleet.maintenance.run_schedule"
# An interval schedule's dispatch expires after its interval, but never sooner than this: a
# short interval must not turn a busy maintenance worker into dropped runs.
_MIN_EXPIRES_S = 60.0


def digest_entries(settings: Settings) -> dict[str, dict[str, Any]]:
    """The dead-letter digest on ``dlq.digest_cron`` (UTC)."""
    return {
        DIGEST_ENTRY: {
            "task": "agentfleet.maintenance.dlq_digest",
            "schedule": cron_schedule(settings.dlq.digest_cron),
            "options": {"queue": settings.queues.maintenance},
        }
    }


def scheduled_fanout_entries(settings: Settings) -> dict[str, dict[str, Any]]:
    """One beat entry per ``[schedules.NAME]``: it sends ``RUN_SCHEDULE_TASK`` with the name.

    A dispatch no maintenance worker took in time expires (``beat.dispatch_expires_s``), so a
    maintenance worker that was down for a day does not start a day of runs at once.
    """
    entries: dict[str, dict[str, Any]] = {}
    limit = settings.beat.dispatch_expires_s
    for name, spec in settings.schedules.items():
        if spec.cron is not None:
            schedule: Any = cron_schedule(spec.cron)
            expires = limit
        else:
            interval = float(spec.interval_s or 0)
            schedule = timedelta(seconds=interval)
            expires = min(limit, max(interval, _MIN_EXPIRES_S))
        entries[f"schedule:{name}"] = {
            "task": RUN_SCHEDULE_TASK,
            "schedule": schedule,
            "kwargs": {"name": name},
            "options": {"queue": settings.queues.maintenance, "expires": expires},
        }
    return entries


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """Every beat entry: the scheduled fan-outs and the dead-letter digest."""
    return {**scheduled_fanout_entries(settings), **digest_entries(settings)}


def redbeat_key_prefix(settings: Settings) -> str:
    """What redbeat puts before the names of its entries, schedule and lock: under our key
    prefix (``agentfleet.keys.redbeat_prefix``)."""
    return redbeat_prefix(settings.key_prefix)


def _sentinel_options(settings: Settings) -> dict[str, Any]:
    """Transport options that point kombu and Celery's result backend at the Sentinels' master."""
    if not settings.broker_url.startswith("sentinel://"):
        return {}
    options: dict[str, Any] = {"master_name": settings.sentinel_master}
    if settings.sentinel_password is not None:
        options["sentinel_kwargs"] = {"password": settings.sentinel_password.get_secret_value()}
    return options


def _autoscaler() -> dict[str, Any]:
    """The pool autoscaler that grows fast under a backlog, unless Celery's autoscaler no longer
    has what it extends (then Celery's own)."""
    if not enabled("fast_autoscale"):
        return {}
    return {"worker_autoscaler": "agentfleet.transport.autoscale:FleetAutoscaler"}


def _consumer() -> dict[str, Any]:
    """The worker consumer that takes out the messages it cannot take (dead letters of category
    ``malformed``) instead of stopping, unless Celery's consumer no longer has what it
    overrides (then Celery's own)."""
    found = consumer_class()
    return {"worker_consumer": found} if found else {}


def _redbeat_options(settings: Settings) -> dict[str, Any]:
    """Where beat keeps its schedule and lock: the broker's Redis, through Sentinel if it is."""
    common = {"socket_connect_timeout": 5, "socket_keepalive": True, "health_check_interval": 30}
    if not settings.broker_url.startswith("sentinel://"):
        # The password travels apart from the URL: `inspect conf` (and Flower's worker pages)
        # show the URL as it is, but mask every option whose name says "password".
        return {
            "redbeat_redis_url": without_password(settings.broker_url),
            "redbeat_redis_options": {**common, "password": url_password(settings.broker_url)},
        }
    first = urlsplit(settings.broker_url.split(";")[0])
    options: dict[str, Any] = {
        "sentinels": sentinel_hosts(settings.broker_url),
        "service_name": settings.sentinel_master,
        "db": int(first.path.strip("/") or 0),
        "socket_timeout": 5,
    }
    if first.password:
        options["password"] = unquote(first.password)
    if settings.sentinel_password is not None:
        options["sentinel_kwargs"] = {"password": settings.sentinel_password.get_secret_value()}
    return {"redbeat_redis_url": "redis-sentinel://", "redbeat_redis_options": options}


def _link_options(settings: Settings) -> dict[str, Any]:
    """kombu's transport options that bound a call on a link that drops packets silently: a
    reply waits ``delivery.redis_timeout_s``, a connection ``redis_connect_timeout_s``; TCP
    keepalive and kombu's health checks (a PING before an idle connection's use, a pending
    ``BRPOP`` dropped once its reply is ``redis_health_check_s`` overdue) find a dead idle one.
    No retry on timeout: kombu then keeps publishing in batches."""
    delivery = settings.delivery
    return {
        "socket_timeout": delivery.redis_timeout_s,
        "socket_connect_timeout": delivery.redis_connect_timeout_s,
        "socket_keepalive": True,
        "socket_keepalive_options": keepalive_options(delivery.redis_health_check_s),
        "health_check_interval": delivery.redis_health_check_s,
    }


def _backend_link_options(settings: Settings) -> dict[str, Any]:
    """The same bounds for Celery's Redis result backend (which sets no keepalive timings)."""
    delivery = settings.delivery
    return {
        "redis_socket_timeout": delivery.redis_timeout_s,
        "redis_socket_connect_timeout": delivery.redis_connect_timeout_s,
        "redis_socket_keepalive": True,
        "redis_backend_health_check_interval": delivery.redis_health_check_s,
    }


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings for agentfleet's delivery semantics (docs/guarantees.md says what they promise)."""
    return {
        **_connections(settings),
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        # A message a worker sends while running an item (a graph's next step, a batch item
        # sent alone) goes at the item's run priority (``orchestration/priority.py``).
        "task_inherit_parent_priority": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "task_time_limit": settings.task_time_limit_s,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "result_expires": settings.celery_result_expires_s,
        # One result backend (and connection pool) per process: without it Celery keeps one
        # per thread, and under gevent one per greenlet, which opens a Redis connection per task.
        "result_backend_thread_safe": True,
        # Inputs stay out of Celery's result keys (the run store has what a run needs), and
        # no STARTED write per task: Flower sees starts through the worker's events.
        "result_extended": False,
        "task_track_started": False,
        "worker_send_task_events": True,
        # A task-sent event per dispatch would double the Redis round trips of a fan-out.
        "task_send_sent_event": False,
        **_routing(settings),
        "worker_max_tasks_per_child": settings.worker.max_tasks_per_child,
        **_autoscaler(),
        **_consumer(),
        "agentfleet_autoscale_keepalive_s": settings.worker.autoscale_keepalive_s,
        "worker_hijack_root_logger": False,
        "enable_utc": True,
        "timezone": "UTC",
        "include": [*BUILTIN_TASK_MODULES, *settings.task_modules],
        **_beat(settings),
    }


def _connections(settings: Settings) -> dict[str, Any]:
    """The broker and the result backend: their URLs, transports and transport options."""
    transport_options = {
        "visibility_timeout": settings.visibility_timeout_s,
        # kombu caps a worker's consumer connection pool at 10 by default and fails past the
        # cap instead of waiting: a gevent pool acknowledging from 100 slots at once then loses
        # acknowledgements, resets the consumer connection and drops a message in flight.
        "max_connections": settings.broker_max_connections,
        "unacked_restore_interval": settings.unacked_restore_interval_s,
        "unacked_restore_throttle": 1,
        **_link_options(settings),
        **_sentinel_options(settings),
    }
    backend_options: dict[str, Any] = {"visibility_timeout": settings.visibility_timeout_s}
    if settings.backend_url.startswith("sentinel://"):
        backend_options.update(_sentinel_options(settings))
    return {
        "broker_url": settings.broker_url,
        "broker_transport": broker_transport(settings.broker_url),
        "result_backend": settings.backend_url,
        "broker_transport_options": transport_options,
        "result_backend_transport_options": backend_options,
        **_backend_link_options(settings),
        "broker_connection_retry_on_startup": True,
    }


def _routing(settings: Settings) -> dict[str, Any]:
    """The three queues and which tasks go to which."""
    queues = settings.queues
    return {
        "task_default_queue": queues.agents,
        "task_queues": [
            Queue(queues.agents, routing_key=queues.agents),
            Queue(queues.fanin, routing_key=queues.fanin),
            Queue(queues.maintenance, routing_key=queues.maintenance),
        ],
        "task_routes": {
            "agentfleet.aggregate": {"queue": queues.fanin},
            "agentfleet.compensate": {"queue": queues.fanin},
            "agentfleet.maintenance.*": {"queue": queues.maintenance},
        },
    }


def _beat(settings: Settings) -> dict[str, Any]:
    """Celery beat with RedBeat: its schedule, loop and lock."""
    return {
        "beat_scheduler": "redbeat.RedBeatScheduler",
        "beat_schedule": beat_schedule(settings),
        "beat_max_loop_interval": settings.beat.max_loop_interval_s,
        "redbeat_key_prefix": redbeat_key_prefix(settings),
        "redbeat_lock_timeout": settings.beat.lock_timeout_s,
        **_redbeat_options(settings),
    }


# The app's AMQP class, by import path: broker connections that fail over on the same transport.
FLEET_AMQP = "agentfleet.transport.failover:FleetAMQP"

# Worker consumer steps, by import path (workers import them; clients never start them): task
# events in batches, unless Celery's dispatcher no longer has what that needs.
CONSUMER_STEPS = ("agentfleet.transport.events:BufferedTaskEvents",) if enabled("batched_events") else ()


def make_app(settings: Settings, *, main: str = "agentfleet", app_cls: type[Celery] = Celery) -> Celery:
    """A Celery app (of class ``app_cls``) configured from ``settings``, with agentfleet's
    worker consumer steps (``CONSUMER_STEPS``) and broker connections that keep agentfleet's
    transport when they fail over to another URL of a ``;``-separated broker URL."""
    celery = app_cls(main, set_as_current=False, amqp=FLEET_AMQP)
    config = celery_config(settings)
    celery.conf.update(config)
    for step in CONSUMER_STEPS:
        celery.steps["consumer"].add(step)
    return celery
