"""Task messages built once per run and stamped per item: what dispatch sends at wire speed.

Sending a message through ``Signature.apply_async`` costs about 200 µs of the client's CPU:
Celery routes it, builds its headers and a ``saferepr`` of its arguments, kombu serialises it
and wraps it in its envelope, and each message is its own round trip to Redis. Every item of
a one-stage run differs only in its task id, its keyword arguments and its delivery tag, so a
``MessageTemplate`` has Celery and kombu build the first item's message for real (its bytes
are what ``apply_async`` would send) and makes every other item's from it: the same envelope,
headers and properties, with the item's own id, body, shown arguments and delivery tag. The
caller pushes them many to a command (``LPUSH queue m1 m2 ...``), one round trip per chunk.

A message made here is a plain Celery message (task protocol 2, JSON, kombu's Redis envelope
with a base64 body); any Celery worker takes it as it takes one ``apply_async`` sent.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.canvas import Signature

__all__ = ["MessageTemplate", "Stamped", "new_delivery_tag"]

# (queue list key, raw message) of the first item, as kombu's Redis transport would push it.
Stamped = tuple[str, bytes]


def _captured(app: Celery, sig: Signature) -> Stamped:
    """``sig`` as kombu would push it: published into a publish batch that is then dropped."""
    with app.producer_or_acquire() as producer, producer.batch(max_size=1_000_000) as batch:
        state = batch.state
        assert state is not None
        try:
            sig.apply_async(producer=producer)
            if state.session is None:
                raise RuntimeError("the broker transport does not batch publishes")
            (command, key, raw), _ = state.session.pipeline.command_stack[-1]
        finally:
            # Nothing of the probe is sent: the item goes out with the others.
            state.abort()
    if str(command).upper() != "LPUSH":
        raise RuntimeError(f"a task message went out as {command}, not LPUSH")
    return str(key), raw if isinstance(raw, bytes) else str(raw).encode()


class MessageTemplate:
    """The messages of one stage-0 task of a run, stamped from one real message.

    ``probe`` is the signature of the run's first item as ``item_signature`` makes it (queue,
    priority, reprs); ``make`` (``MessageTemplate.build``) then stamps any item of the run.
    """

    def __init__(self, key: str, envelope: dict[str, Any], embed: Any) -> None:
        self.key = key
        self._envelope = envelope
        self._embed = json.dumps(embed)

    @classmethod
    def from_signature(cls, app: Celery, probe: Signature) -> MessageTemplate:
        """The template of ``probe``'s run (``probe`` itself is not sent)."""
        key, raw = _captured(app, probe)
        envelope = json.loads(raw)
        if envelope.get("properties", {}).get("body_encoding") != "base64":
            raise RuntimeError("kombu's envelope changed: the body is not base64")
        body = json.loads(base64.b64decode(envelope["body"]))
        return cls(key, envelope, body[2])

    def build(
        self, task_id: str, kwargs_json: str, kwargsrepr: str, delivery_tag: Callable[[], str]
    ) -> bytes:
        """The raw message of item ``task_id`` whose keyword arguments are ``kwargs_json`` (a JSON
        object), shown as ``kwargsrepr``."""
        envelope = dict(self._envelope)
        headers = dict(envelope["headers"])
        headers["id"] = headers["root_id"] = task_id
        headers["kwargsrepr"] = kwargsrepr
        properties = dict(envelope["properties"])
        properties["correlation_id"] = task_id
        properties["delivery_tag"] = delivery_tag()
        if "kwargsrepr" in properties:
            properties["kwargsrepr"] = kwargsrepr
        envelope["headers"] = headers
        envelope["properties"] = properties
        body = f"[[], {kwargs_json}, {self._embed}]".encode()
        envelope["body"] = base64.b64encode(body).decode()
        return json.dumps(envelope).encode()


def new_delivery_tag() -> str:
    """A delivery tag as kombu makes one (a random UUID)."""
    return str(uuid.uuid4())
