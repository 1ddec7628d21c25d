"""Every private name of kombu, redis-py and Celery that agentfleet relies on, checked at import.

agentfleet's speed comes partly from reaching inside the libraries it is built on: kombu's Redis
channel, poller and QoS, redis-py's connections and pools, Celery's autoscaler, tracer, event
dispatcher and request. Those names carry no promise: any release may rename or reshape them.
So each one is listed here, with the feature that needs it, and checked when the package is
imported: the attribute is there, a method takes the parameters it took, an attribute the
library sets on its instances is still set by the method that set it. A feature with a name
missing is switched off and the stock behaviour is used instead (kombu's own transport, redis-py's
own pools, Celery's own autoscaler ...), with one warning that names the library, its version
and what was not found: a new release makes agentfleet slower, never broken.

``tests/test_private_names.py`` keeps this list honest: it fails when a library-private name is
used outside this package, or used here without being listed.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

__all__ = ["FEATURES", "NEEDS", "Need", "enabled", "problems", "report"]

log = logging.getLogger("agentfleet.transport")

#: What each feature is, for the warning when it is switched off.
FEATURES: dict[str, str] = {
    "redis_transport": "the Redis transport (window-sized takes, batched acknowledgements, quick poller)",
    "quick_pools": "redis-py pools and connections without the per-call deprecation and poll overhead",
    "driver_info": "redis-py's version read once per process for CLIENT SETINFO",
    "stamped_dispatch": "task messages stamped from one real message (dispatch at wire speed)",
    "fast_autoscale": "the autoscaler that doubles a pool while work waits for a slot",
    "quick_result_repr": "the builtin repr of fleet outcomes in Celery's success line and event",
    "batched_events": "task events published in batches on every pool",
    "finishing_request": "hard time limits turned into fleet retries or dead letters",
    "quiet_results": "a dispatching client that does not subscribe to every task's result",
    "fleet_consumer": "the worker consumer that takes out messages Celery cannot take instead of stopping",
}


@dataclass(frozen=True)
class Need:
    """One private name a feature relies on.

    ``owner`` is ``module`` or ``module:Class``; ``name`` the attribute on it. ``params``, for a
    method or function, are the names of its first parameters (``self`` left out); ``set_by``,
    for an attribute the library sets on its instances, is the method whose code sets it.
    """

    feature: str
    library: str
    owner: str
    name: str
    params: tuple[str, ...] | None = None
    set_by: str | None = None

    @property
    def where(self) -> str:
        return f"{self.owner.replace(':', '.')}.{self.name}"


_KR = "kombu.transport.redis"
_KV = "kombu.transport.virtual.base"
_ED = "celery.events.dispatcher:EventDispatcher"
_CC = "celery.worker.consumer.consumer:Consumer"

NEEDS: tuple[Need, ...] = (
    # The Redis transport (redis_channel, intake, acks).
    Need("redis_transport", "kombu", f"{_KR}:Channel", "_create_client", ("asynchronous",)),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "_get_pool", ("asynchronous",)),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "_brpop_read", ("options",)),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "_q_for_pri", ("queue", "pri")),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "_closing", set_by="close"),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "_queue_cycle", set_by="__init__"),
    Need("redis_transport", "kombu", f"{_KV}:Channel", "_qos", set_by="__init__"),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "priority_steps"),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "sep"),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "global_keyprefix"),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "basic_consume", ("queue",)),
    Need("redis_transport", "kombu", f"{_KR}:Channel", "connection_class"),
    Need("redis_transport", "kombu", f"{_KR}:MultiChannelPoller", "get", ("callback", "timeout")),
    Need("redis_transport", "kombu", f"{_KR}:MultiChannelPoller", "maybe_restore_messages", ()),
    Need("redis_transport", "kombu", f"{_KR}:MultiChannelPoller", "_channels", set_by="__init__"),
    Need("redis_transport", "kombu", f"{_KR}:Transport", "cycle", set_by="__init__"),
    Need("redis_transport", "kombu", f"{_KV}:Transport", "_deliver", ("message", "queue")),
    Need("redis_transport", "kombu", f"{_KR}:QoS", "append", ("message", "delivery_tag")),
    Need("redis_transport", "kombu", f"{_KR}:QoS", "restore_by_tag", ("tag", "client", "leftmost")),
    Need("redis_transport", "kombu", f"{_KR}:QoS", "pipe_or_acquire", ("pipe", "client")),
    Need("redis_transport", "kombu", f"{_KR}:QoS", "restore_unacked", ("client",)),
    Need("redis_transport", "kombu", f"{_KV}:QoS", "_delivered", set_by="__init__"),
    Need("redis_transport", "kombu", f"{_KV}:QoS", "_dirty", set_by="__init__"),
    Need("redis_transport", "kombu", f"{_KV}:Message", "_raw", set_by="__init__"),
    Need("redis_transport", "redis", "redis.client:Redis", "set_response_callback", ("command", "callback")),
    Need("redis_transport", "redis", "redis.client:Redis", "response_callbacks", set_by="__init__"),
    # redis-py's connections and pools (pools).
    Need("quick_pools", "redis", "redis.connection:AbstractConnection", "_sock", set_by="__init__"),
    Need("quick_pools", "redis", "redis.connection:AbstractConnection", "_parser", set_by="__init__"),
    Need("quick_pools", "redis", "redis.connection:AbstractConnection", "can_read", ("timeout",)),
    Need("quick_pools", "redis", "redis._parsers:_HiredisParser", "_reader", set_by="on_connect"),
    Need("quick_pools", "redis", "redis.connection:ConnectionPool", "get_connection"),
    Need("driver_info", "redis", "redis.driver_info", "DriverInfo"),
    # Stamped task messages (stamping): kombu's publish batch, read before it is sent.
    Need("stamped_dispatch", "kombu", "kombu.messaging:Producer", "batch", ("max_size",)),
    Need("stamped_dispatch", "kombu", "kombu.messaging:_ProducerBatchState", "session", set_by="__init__"),
    Need("stamped_dispatch", "kombu", "kombu.messaging:_ProducerBatchState", "abort", ()),
    Need("stamped_dispatch", "kombu", f"{_KR}:PublishBatch", "pipeline", set_by="__init__"),
    Need("stamped_dispatch", "redis", "redis.client:Pipeline", "command_stack", set_by="reset"),
    # Celery's autoscaler (autoscale).
    Need("fast_autoscale", "celery", "celery.worker.autoscale:Autoscaler", "_maybe_scale", ("req",)),
    Need("fast_autoscale", "celery", "celery.worker.autoscale:Autoscaler", "scale_up", ("n",)),
    # Celery's tracer (result_repr).
    Need("quick_result_repr", "celery", "celery.app.trace", "saferepr"),
    # Celery's event dispatcher (events).
    Need("batched_events", "celery", _ED, "buffer_group", set_by="__init__"),
    Need("batched_events", "celery", _ED, "on_send_buffered", set_by="__init__"),
    Need("batched_events", "celery", _ED, "flush", ("errors",)),
    # Celery's request (request).
    Need("finishing_request", "celery", "celery.worker.request:Request", "_context"),
    Need("finishing_request", "celery", "celery.worker.request:Request", "on_timeout", ("soft", "timeout")),
    Need(
        "finishing_request",
        "celery",
        "celery.worker.request:Request",
        "on_failure",
        ("exc_info", "send_failed_event", "return_ok"),
    ),
    Need("finishing_request", "celery", "celery.worker.state", "task_ready", ("request",)),
    # Celery's worker consumer (consumer).
    Need("fleet_consumer", "celery", _CC, "create_task_handler"),
    Need("fleet_consumer", "celery", _CC, "on_decode_error", ("message", "exc")),
    Need("fleet_consumer", "celery", _CC, "connection_errors", set_by="__init__"),
    Need("fleet_consumer", "celery", _CC, "channel_errors", set_by="__init__"),
    Need("fleet_consumer", "celery", "celery.worker.state", "should_stop"),
    Need("fleet_consumer", "celery", "celery.worker.state", "should_terminate"),
    # Celery's app (results).
    Need("quiet_results", "celery", "celery.app.base:Celery", "_get_backend", ()),
    Need(
        "quiet_results",
        "celery",
        "celery.backends.redis:RedisBackend",
        "on_task_call",
        ("producer", "task_id"),
    ),
    Need(
        "quiet_results",
        "celery",
        "celery.backends.redis:RedisBackend",
        "add_pending_result",
        ("result", "weak", "start_drainer"),
    ),
    Need(
        "quiet_results", "celery", "celery.backends.redis:RedisBackend", "remove_pending_result", ("result",)
    ),
)


def _resolve(owner: str) -> Any:
    module, _, qualname = owner.partition(":")
    found: Any = importlib.import_module(module)
    for part in filter(None, qualname.split(".")):
        found = getattr(found, part)
    return found


def _code_names(function: Any) -> set[str]:
    code = getattr(inspect.unwrap(function), "__code__", None)
    return set(code.co_names) if code is not None else set()


def _check(need: Need) -> str | None:
    """None when ``need`` holds, else what is wrong, in a few words."""
    try:
        owner = _resolve(need.owner)
    except (ImportError, AttributeError):
        return "not found"
    if need.set_by is not None:
        # Set on instances: the named method must still set it (or the class have it).
        setter = getattr(owner, need.set_by, None) if inspect.isclass(owner) else None
        sets = setter is not None and need.name in _code_names(setter)
        if not sets and not (inspect.isclass(owner) and hasattr(owner, need.name)):
            return f"no longer set by {need.set_by}"
        return None
    if not hasattr(owner, need.name):
        return "not found"
    if need.params is None:
        return None
    target = getattr(owner, need.name)
    try:
        params = list(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return "signature unreadable"
    if params and params[0] in ("self", "cls") and inspect.isclass(owner):
        params = params[1:]
    if params[: len(need.params)] != list(need.params):
        return f"takes ({', '.join(params)}), not ({', '.join(need.params)}, ...)"
    return None


def _version(library: str) -> str:
    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return "?"


@functools.cache
def problems() -> dict[str, list[str]]:
    """Per feature, what was not found (empty lists for the features that hold)."""
    found: dict[str, list[str]] = {feature: [] for feature in FEATURES}
    for need in NEEDS:
        problem = _check(need)
        if problem is not None:
            found[need.feature].append(f"{need.library} {_version(need.library)}: {need.where} {problem}")
    return found


_warned: set[str] = set()


def enabled(feature: str) -> bool:
    """Whether ``feature``'s private names all hold; the first False logs one warning."""
    missing = problems()[feature]
    if missing and feature not in _warned:
        _warned.add(feature)
        log.warning(
            "%s is off, the stock behaviour is used instead (%s)", FEATURES[feature], "; ".join(missing)
        )
    return not missing


def report(features: Iterable[str] = FEATURES) -> dict[str, bool]:
    """Which features are on, by name (no warnings)."""
    found = problems()
    return {feature: not found[feature] for feature in features}
