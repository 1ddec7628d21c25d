"""Task messages built once per run and stamped per item: what dispatch sends at wire speed.

Sending a message through ``Signature.apply_async`` costs about 200 µs of the client's CPU:
Celery routes it, builds its headers and a ``saferepr`` of its arguments, kombu serialises it
and wraps it in its envelope, and each message is its own round trip to Redis. Every item of
a one-stage run differs only in its task id, its keyword arguments and its delivery tag, so a
``MessageTemplate`` has Celery and kombu build the first item's message for real (its bytes
are what ``apply_async`` would send) and makes every other item's from it: the same envelope,
headers and properties, with the item's own id, body, shown arguments and delivery tag. The
caller pushes them many to a command (``LPUSH queue m1 m2 ...``), one round trip per chunk.

One thing of the real message is left out: Celery hands the ``argsrepr`` and ``kwargsrepr`` it
puts in the headers on to kombu as publish options as well, which kombu keeps as message
properties, where no worker reads them (Celery's reads the headers). The shown arguments are
up to 1 KiB each: without the copies, a message costs less to store, send and parse, in Redis's
``take.lua`` as in the worker.

A message made here is a plain Celery message (task protocol 2, JSON, kombu's Redis envelope
with a base64 body); any Celery worker takes it as it takes one ``apply_async`` sent.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import uuid
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from celery import Celery
from celery.canvas import Signature

from agentfleet.transport.internals import enabled

__all__ = ["MessageTemplate", "Stamped", "delivery_tags", "new_delivery_tag", "publish_all"]

# (queue list key, raw message) of the first item, as kombu's Redis transport would push it.
Stamped = tuple[str, bytes]


def publish_all(app: Celery, sigs: Sequence[Signature]) -> None:
    """Send ``sigs`` through Celery in one kombu publish batch (one round trip), or one at a time
    with a kombu whose publish batch is not the one ``internals`` checked."""
    with app.producer_or_acquire() as producer:
        if not enabled("stamped_dispatch"):
            for sig in sigs:
                sig.apply_async(producer=producer)
            return
        with producer.batch(max_size=len(sigs) or 1):
            for sig in sigs:
                sig.apply_async(producer=producer)


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


# A JSON string literal of a str (what json.dumps does for one, without its general machinery).
_quoted = encode_basestring_ascii

# Stand-ins for the fields that differ per item, in the template's JSON text.
_MARKS = {"id": "@@af-id@@", "shown": "@@af-shown@@", "tag": "@@af-tag@@", "body": "@@af-body@@"}
_SPLIT = re.compile("|".join(re.escape(f'"{mark}"') for mark in _MARKS.values()))
_NAMES = {f'"{mark}"': name for name, mark in _MARKS.items()}
# Headers Celery also leaves among the properties (see the module docstring).
_PUBLISH_COPIES = frozenset({"argsrepr", "kwargsrepr"})


class MessageTemplate:
    """The messages of one stage-0 task of a run, stamped from one real message.

    ``from_signature`` takes the signature of the run's first item as ``item_signature`` makes
    it (queue, priority, reprs); ``build`` then stamps any item of the run: the real message's
    JSON text with the item's own values put in.
    """

    def __init__(self, key: str, envelope: dict[str, Any], embed: Any) -> None:
        self.key = key
        self._embed = json.dumps(embed)
        marked = dict(envelope)
        marked["headers"] = {**envelope["headers"], "id": _MARKS["id"], "root_id": _MARKS["id"]}
        marked["headers"]["kwargsrepr"] = _MARKS["shown"]
        properties = {k: v for k, v in envelope["properties"].items() if k not in _PUBLISH_COPIES}
        marked["properties"] = {**properties, "correlation_id": _MARKS["id"], "delivery_tag": _MARKS["tag"]}
        marked["body"] = _MARKS["body"]
        text = json.dumps(marked)
        self._literals = _SPLIT.split(text)
        self._fields = [_NAMES[found] for found in _SPLIT.findall(text)]

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
        body = base64.b64encode(f"[[], {kwargs_json}, {self._embed}]".encode()).decode()
        values = {
            "id": _quoted(task_id),
            "shown": _quoted(kwargsrepr),
            "tag": _quoted(delivery_tag()),
            "body": f'"{body}"',
        }
        parts = [self._literals[0]]
        for name, literal in zip(self._fields, self._literals[1:], strict=True):
            parts += (values[name], literal)
        return "".join(parts).encode()


def delivery_tags() -> Callable[[], str]:
    """Delivery tags for one dispatch: a random prefix and a counter (kombu's own are random
    UUIDs; a tag only has to be unique among the messages taken and not yet acknowledged)."""
    prefix = uuid.uuid4().hex
    counter = itertools.count()
    return lambda: f"{prefix}-{next(counter)}"


def new_delivery_tag() -> str:
    """A delivery tag as kombu makes one (a random UUID)."""
    return str(uuid.uuid4())
