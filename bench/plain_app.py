"""Plain Celery, the benchmarks' anchor: a Celery app with nothing of agentfleet's in it.

Configured as agentfleet configures its own where delivery is concerned (late acknowledgement,
one message reserved per slot unless ``PLAIN_PREFETCH`` says more, task events on for Flower,
JSON), with Celery's Redis result backend and kombu's own Redis transport. kombu's cap on a
worker's Redis connections is raised from 10 to 2,000, as agentfleet raises its own: at 100
gevent slots the default cap fails acknowledgements ("Too many connections") and loses messages,
and the anchor's runs then never finish.

``PLAIN_TRANSPORT`` names another kombu transport class for the worker (by import path: a
benchmark comparing transports runs the same app on each), ``PLAIN_VISIBILITY_S`` a visibility
timeout other than kombu's hour (looked for every second). ``BENCH_ACK_PROBE`` turns on
``ack_delay.py``'s timing of ``ack()`` calls (``_ack_probe``).
"""

from __future__ import annotations

import os
import time

import redis
from _ack_probe import install
from celery import Celery

URL = os.environ.get("PLAIN_BROKER_URL", "redis://127.0.0.1:6379/0")

app = Celery("plain", broker=URL, backend=URL)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=int(os.environ.get("PLAIN_PREFETCH", "1")),
    worker_send_task_events=True,
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_default_queue=os.environ.get("PLAIN_QUEUE", "plain"),
    worker_hijack_root_logger=False,
    broker_transport=os.environ.get("PLAIN_TRANSPORT") or None,
    broker_transport_options={
        "max_connections": 2000,
        **(
            {
                "visibility_timeout": float(os.environ["PLAIN_VISIBILITY_S"]),
                # Looked for every second, not every 100 s (kombu's 10 s interval, every 10th).
                "unacked_restore_interval": 1,
                "unacked_restore_throttle": 1,
                # A worker killed while it held the restore lock holds it this long, not 300 s.
                "unacked_mutex_expire": 5,
            }
            if "PLAIN_VISIBILITY_S" in os.environ
            else {}
        ),
    },
)

install()  # ack_delay.py's instrumentation, when it asks for it


@app.task(name="plain.sleep")
def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@app.task(name="plain.noop")
def noop(**inputs: object) -> None:
    """Takes whatever inputs a benchmark sends its fleet's task (as the dispatch anchor does)."""
    return None


@app.task(name="plain.counted")
def counted(token: str, sleep_s: float) -> None:
    """Sleeps, then counts its finished runs in Redis under ``plain:runs:{token}``."""
    time.sleep(sleep_s)
    with redis.Redis.from_url(URL) as client:
        client.incr(f"plain:runs:{token}")


@app.task(name="plain.marked")
def marked(token: str) -> None:
    """Marks when its body ended (Unix seconds) in Redis under ``plain:end:{token}``."""
    with redis.Redis.from_url(URL) as client:
        client.set(f"plain:end:{token}", time.time(), ex=600)
