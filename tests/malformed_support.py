"""Queue entries for the malformed-message tests: Celery's task message (protocol 2) as kombu's
Redis transport keeps it, a catalogue of entries a worker cannot take, and raw pushes."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import redis


def envelope(
    task: str, *, queue: str, kwargs: dict[str, Any] | None = None, **overrides: Any
) -> dict[str, Any]:
    """A task message as Celery sends it and kombu's Redis transport keeps it in ``queue``."""
    task_id = str(uuid.uuid4())
    body = [[], kwargs or {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    message: dict[str, Any] = {
        "body": base64.b64encode(json.dumps(body).encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": task,
            "id": task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": "()",
            "kwargsrepr": repr(kwargs or {}),
            "origin": "tests@host",
            "ignore_result": False,
        },
        "properties": {
            "correlation_id": task_id,
            "reply_to": str(uuid.uuid4()),
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    message.update(overrides)
    return message


def encoded(message: dict[str, Any] | list[Any]) -> bytes:
    return json.dumps(message).encode()


def with_body(message: dict[str, Any], body: bytes) -> dict[str, Any]:
    return {**message, "body": base64.b64encode(body).decode()}


def bad_entries(queue: str, task: str) -> dict[str, tuple[bytes, str]]:
    """Entries a worker consuming ``queue`` cannot take, by name: the raw entry, and a part of
    the reason its dead letter must give. ``task`` is a task the workers have."""
    good = envelope(task, queue=queue, kwargs={"n": 1})
    properties = good["properties"]
    return {
        "not JSON": (b"\xff\xfe this is not JSON", "not JSON"),
        "a JSON list": (b"[1, 2, 3]", "JSON that is not an object (a list)"),
        "a JSON string": (b'"hello"', "JSON that is not an object (a string)"),
        "no properties": (encoded({k: v for k, v in good.items() if k != "properties"}), "no 'properties'"),
        "no delivery tag": (
            encoded({**good, "properties": {**properties, "delivery_tag": None}}),
            "delivery_tag is missing",
        ),
        "no delivery info": (
            encoded({**good, "properties": {**properties, "delivery_info": None}}),
            "delivery_info is missing",
        ),
        "a body that is not base64": (encoded({**good, "body": "!!!not base64"}), "not valid base64"),
        "a content type refused": (
            encoded({**good, "content-type": "application/data"}),
            "content type 'application/data' is not one the workers accept",
        ),
        "a body that is not JSON": (encoded(with_body(good, b"{nope")), "its body does not decode as JSON"),
        "a body that is not a list": (
            encoded(with_body(good, b"42")),
            "not Celery's [args, kwargs, options]",
        ),
        "no Celery headers": (encoded({**good, "headers": {}}), "Celery headers missing"),
        "no task id": (
            encoded({**good, "headers": {k: v for k, v in good["headers"].items() if k != "id"}}),
            "Celery headers missing or not strings: id",
        ),
        # Celery reads a body of protocol 1 fields, taking the id from it when the headers lack
        # one: with neither, it ran the task and never acknowledged the message.
        "a body of protocol 1 fields and no task id": (
            encoded(
                with_body(
                    {**good, "headers": {k: v for k, v in good["headers"].items() if k != "id"}},
                    b'{"args": [], "kwargs": {"n": 1}}',
                )
            ),
            "Celery headers missing or not strings: id",
        ),
        "time limits that are not [hard, soft]": (
            encoded({**good, "headers": {**good["headers"], "timelimit": 30}}),
            "timelimit header is not [hard, soft] seconds",
        ),
        "a task no worker has": (
            encoded(envelope("tests.no_such_task", queue=queue)),
            "this worker has no task named 'tests.no_such_task'",
        ),
    }


def push(client: redis.Redis, queue: str, *entries: bytes | str) -> None:
    """Put ``entries`` in ``queue`` (kombu's list), to be taken in the order given."""
    client.lpush(queue, *entries)
