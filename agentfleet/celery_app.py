"""The Celery app and its configuration, nothing else.

``celery -A agentfleet.celery_app worker`` runs a worker with the settings from the
environment and ``agentfleet.toml``. ``make_app(settings)`` builds another app with the same
configuration (``Fleet`` uses one to send work to a chosen broker).
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.schedules import crontab
from kombu import Queue

from agentfleet.config import Settings, get_settings

__all__ = ["BUILTIN_TASK_MODULES", "DIGEST_ENTRY", "app", "beat_schedule", "celery_config", "make_app"]

BUILTIN_TASK_MODULES = [
    "agentfleet.tasks.builtin",
    "agentfleet.tasks.llm_tasks",
    "agentfleet.tasks.maintenance",
]
DIGEST_ENTRY = "agentfleet-dlq-digest"


def beat_schedule(settings: Settings) -> dict[str, Any]:
    """What ``celery beat`` sends: the dead-letter digest on ``dlq.digest_cron`` (UTC)."""
    minute, hour, day, month, weekday = settings.dlq.digest_cron.split()
    return {
        DIGEST_ENTRY: {
            "task": "agentfleet.maintenance.dlq_digest",
            "schedule": crontab(minute, hour, day_of_month=day, month_of_year=month, day_of_week=weekday),
            "options": {"queue": settings.queues.maintenance},
        }
    }


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings for agentfleet's delivery semantics (see DESIGN.md)."""
    queues = settings.queues
    transport_options = {
        "visibility_timeout": settings.visibility_timeout_s,
        "unacked_restore_interval": settings.unacked_restore_interval_s,
        "unacked_restore_throttle": 1,
        "socket_keepalive": True,
        "health_check_interval": 30,
    }
    return {
        "broker_url": settings.broker_url,
        "result_backend": settings.backend_url,
        "broker_transport_options": transport_options,
        "result_backend_transport_options": {"visibility_timeout": settings.visibility_timeout_s},
        "broker_connection_retry_on_startup": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        "task_time_limit": settings.task_time_limit_s,
        "task_soft_time_limit": settings.task_soft_time_limit_s,
        "result_expires": settings.celery_result_expires_s,
        # Inputs stay out of Celery's result keys (the run store has what a run needs), and
        # no STARTED write per task: Flower sees starts through the worker's events.
        "result_extended": False,
        "task_track_started": False,
        "worker_send_task_events": True,
        # A task-sent event per dispatch would double the Redis round trips of a fan-out.
        "task_send_sent_event": False,
        "task_default_queue": queues.agents,
        "task_queues": [
            Queue(queues.agents, routing_key=queues.agents),
            Queue(queues.fanin, routing_key=queues.fanin),
            Queue(queues.maintenance, routing_key=queues.maintenance),
        ],
        "task_routes": {
            "agentfleet.aggregate": {"queue": queues.fanin},
            "agentfleet.maintenance.*": {"queue": queues.maintenance},
        },
        "worker_max_tasks_per_child": settings.worker.max_tasks_per_child,
        "worker_hijack_root_logger": False,
        "enable_utc": True,
        "timezone": "UTC",
        "include": [*BUILTIN_TASK_MODULES, *settings.task_modules],
        "beat_schedule": beat_schedule(settings),
    }


def make_app(settings: Settings, *, main: str = "agentfleet", app_cls: type[Celery] = Celery) -> Celery:
    """A Celery app (of class ``app_cls``) configured from ``settings``."""
    celery = app_cls(main, set_as_current=False)
    config = celery_config(settings)
    celery.conf.update(config)
    return celery


app = make_app(get_settings())
app.set_current()
app.set_default()
