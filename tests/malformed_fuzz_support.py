"""The fuzz test's bad entries: random byte strings, and real task messages (as ``Fleet.map``
makes them) mutated field by field, one to three mutations each."""

from __future__ import annotations

import base64
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

Mutation = Callable[[random.Random, bytes], bytes]

_WRONG_VALUES: tuple[Any, ...] = (None, 0, -1, 2**63, 1.5, True, "", "x", [], [1, "a"], {}, {"a": None})
_CONTENT_TYPES = (
    "application/data",
    "text/plain",
    "application/x-python-serialize",
    "",
    None,
    42,
    "application/JSON",
)
_ENCODINGS = ("utf-16", "rot13", "binary", "latin-1", "", None, 7, "utf-8-sig")


def random_bytes(rng: random.Random) -> bytes:
    """Up to 600 random bytes (sometimes none)."""
    return rng.randbytes(rng.choice((0, 1, 2, 8, 64, 600)) if rng.random() < 0.3 else rng.randint(0, 600))


def _load(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _dump(message: Any) -> bytes:
    return json.dumps(message).encode()


def _body(message: dict[str, Any]) -> bytes:
    try:
        return base64.b64decode(message["body"])
    except Exception:
        return b""


def truncate(rng: random.Random, raw: bytes) -> bytes:
    return raw[: rng.randrange(len(raw))] if raw else raw


def flip_bytes(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 5)):
        if data:
            data[rng.randrange(len(data))] ^= rng.randint(1, 255)
    return bytes(data)


def _on_message(change: Callable[[random.Random, dict[str, Any]], None]) -> Mutation:
    def mutate(rng: random.Random, raw: bytes) -> bytes:
        message = _load(raw)
        if not isinstance(message, dict):
            return flip_bytes(rng, raw)
        change(rng, message)
        return _dump(message)

    mutate.__name__ = change.__name__
    return mutate


def _pick(rng: random.Random, mapping: Any) -> str | None:
    return rng.choice(sorted(mapping)) if isinstance(mapping, dict) and mapping else None


@_on_message
def drop_headers(rng: random.Random, message: dict[str, Any]) -> None:
    headers = message.get("headers")
    if rng.random() < 0.3 or not isinstance(headers, dict):
        message.pop("headers", None)
        return
    for _ in range(rng.randint(1, 3)):
        key = _pick(rng, headers)
        if key is not None:
            headers.pop(key)


@_on_message
def drop_envelope_field(rng: random.Random, message: dict[str, Any]) -> None:
    properties = message.get("properties")
    if rng.random() < 0.5 and isinstance(properties, dict):
        properties.pop(rng.choice(("delivery_tag", "delivery_info", "body_encoding", "priority")), None)
    else:
        message.pop(rng.choice(("body", "properties", "content-type", "content-encoding")), None)


@_on_message
def wrong_type(rng: random.Random, message: dict[str, Any]) -> None:
    where = rng.choice(("headers", "properties", "top", "info"))
    target: Any = {
        "headers": message.get("headers"),
        "properties": message.get("properties"),
        "top": message,
        "info": (message.get("properties") or {}).get("delivery_info")
        if isinstance(message.get("properties"), dict)
        else None,
    }[where]
    key = _pick(rng, target)
    if key is not None:
        target[key] = rng.choice(_WRONG_VALUES)


@_on_message
def wrong_content_type(rng: random.Random, message: dict[str, Any]) -> None:
    message["content-type"] = rng.choice(_CONTENT_TYPES)


@_on_message
def wrong_content_encoding(rng: random.Random, message: dict[str, Any]) -> None:
    message["content-encoding"] = rng.choice(_ENCODINGS)


@_on_message
def bad_base64(rng: random.Random, message: dict[str, Any]) -> None:
    body = str(message.get("body") or "")
    message["body"] = rng.choice((body[:-1], "!" + body, body + "=" * rng.randint(1, 3), "%%%", body.upper()))


@_on_message
def body_not_a_list(rng: random.Random, message: dict[str, Any]) -> None:
    decoded = _load(_body(message))
    shapes: list[Any] = [{"args": 1}, 42, "text", [], [1, 2], [[], {}, {}, {}], [{}, [], {}], None]
    if isinstance(decoded, list) and len(decoded) == 3:
        shapes += [[decoded[0], rng.choice(_WRONG_VALUES), decoded[2]], [decoded[1], decoded[0], decoded[2]]]
    message["body"] = base64.b64encode(_dump(rng.choice(shapes))).decode()


@_on_message
def body_not_json(rng: random.Random, message: dict[str, Any]) -> None:
    message["body"] = base64.b64encode(flip_bytes(rng, _body(message)) + rng.randbytes(3)).decode()


@_on_message
def compressed_garbage(rng: random.Random, message: dict[str, Any]) -> None:
    headers = message.setdefault("headers", {})
    if isinstance(headers, dict):
        headers["compression"] = rng.choice(("application/x-gzip", "application/x-bz2", "zstd", "nope"))


@_on_message
def garbage_times(rng: random.Random, message: dict[str, Any]) -> None:
    headers = message.get("headers")
    if isinstance(headers, dict):
        field = rng.choice(("eta", "expires", "timelimit", "retries", "root_id", "group_index"))
        headers[field] = rng.choice(("yesterday", "2020-13-45T99:99", [1, 2, 3], {"x": 1}, "∞", -5))


MUTATIONS: tuple[Mutation, ...] = (
    truncate,
    flip_bytes,
    drop_headers,
    drop_envelope_field,
    wrong_type,
    wrong_content_type,
    wrong_content_encoding,
    bad_base64,
    body_not_a_list,
    body_not_json,
    compressed_garbage,
    garbage_times,
)


def fresh(raw: bytes, queue: str) -> bytes:
    """A real message as if sent again to ``queue``: a delivery tag of its own."""
    message = json.loads(raw)
    message["properties"]["delivery_tag"] = str(uuid.uuid4())
    message["properties"]["delivery_info"]["routing_key"] = queue
    return _dump(message)


def mutated(rng: random.Random, template: bytes) -> bytes:
    """``template`` with one to three mutations applied in turn."""
    raw = template
    for mutation in rng.sample(MUTATIONS, rng.randint(1, 3)):
        raw = mutation(rng, raw)
    return raw
