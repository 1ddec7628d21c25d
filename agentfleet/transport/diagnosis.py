"""What is wrong with a queue entry, in words: as JSON, as kombu's envelope on the Redis
transport, and as a Celery task message (protocol 2).

The checks a worker runs on every message are cheap (``shape_problem``, ``header_problem``: a
few type checks); the whole diagnosis (``diagnose``) decodes the body too, and runs only for an
entry that failed already, to say why (``transport.malformed``).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection
from typing import Any

from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

__all__ = ["diagnose", "envelope_problem", "header_problem", "quoted", "shape_problem"]

#: Longest exception text a reason quotes, in characters.
MAX_EXCEPTION_CHARS = 300


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else "null"
    )


def quoted(exc: BaseException) -> str:
    """``exc`` as a reason quotes it: its type and message, cut short."""
    return f"{type(exc).__name__}: {exc}"[:MAX_EXCEPTION_CHARS]


def envelope_problem(payload: Any) -> str | None:
    """What keeps ``payload`` (a parsed entry) from being a kombu message on the Redis
    transport, or None: an object with ``properties`` holding a delivery tag and the delivery
    info (exchange and routing key) kombu records it under, and a body its encoding decodes."""
    problem = shape_problem(payload)
    if problem is not None:
        return problem
    return _body_problem(payload.get("body"), payload["properties"].get("body_encoding"))


def shape_problem(payload: Any) -> str | None:
    """``envelope_problem`` without the body: what kombu reads of a message before it decodes
    the body (a few type checks, cheap enough for every delivery)."""
    try:
        # The message every producer sends, checked without a call: then the reasons below.
        properties = payload["properties"]
        info, tag = properties["delivery_info"], properties["delivery_tag"]
        if (
            tag.__class__ is str
            and tag
            and info["exchange"].__class__ is str
            and info["routing_key"].__class__ is str
            and payload.__class__ is dict
            and properties.__class__ is dict
            and info.__class__ is dict
        ):
            return None
    except (KeyError, TypeError, IndexError):
        pass
    return _shape_reason(payload)


def _shape_reason(payload: Any) -> str | None:
    if not isinstance(payload, dict):
        return f"JSON that is not an object ({_kind(payload)})"
    properties = payload.get("properties")
    if not isinstance(properties, dict):
        return "not a kombu message: no 'properties' object"
    tag = properties.get("delivery_tag")
    if not isinstance(tag, str) or not tag:
        return "not a kombu message: properties.delivery_tag is missing or not a string"
    info = properties.get("delivery_info")
    if not isinstance(info, dict):
        return "not a kombu message: properties.delivery_info is missing or not an object"
    for field in ("exchange", "routing_key"):
        if not isinstance(info.get(field), str):
            return f"not a kombu message: properties.delivery_info.{field} is missing or not a string"
    return None


def _body_problem(body: Any, encoding: Any) -> str | None:
    if body is not None and not isinstance(body, str):
        return f"its body is {_kind(body)}, not a string"
    if encoding is not None and not isinstance(encoding, str):
        return "properties.body_encoding is not a string"
    if not body or not encoding or encoding.lower() == "utf-8":
        return None
    if encoding != "base64":
        return f"its body encoding {encoding!r} is not one kombu knows (base64)"
    try:
        base64.b64decode(body.encode("utf-8", "surrogateescape"))
    except (binascii.Error, ValueError) as exc:
        return f"its body is not valid base64 ({exc})"
    return None


# What Celery sends for a task without time limits.
_NO_LIMITS = [None, None]


def header_problem(headers: Any) -> str | None:
    """What in Celery's headers Celery reads only once the task goes to the pool, away from the
    message (a prefork worker's pool may take it later: an error there stops the worker), or
    None: the time limits, ``[hard, soft]`` seconds or nothing. Cheap enough for every message."""
    limits = headers.get("timelimit") if isinstance(headers, dict) else None
    if not limits or limits == _NO_LIMITS:
        return None
    if not (isinstance(limits, list | tuple) and len(limits) == 2):
        return "its timelimit header is not [hard, soft] seconds"
    if not all(limit is None or isinstance(limit, int | float) for limit in limits):
        return "its timelimit header is not [hard, soft] seconds"
    return None


def _body_bytes(payload: dict[str, Any]) -> bytes:
    body = payload.get("body") or ""
    if payload["properties"].get("body_encoding") == "base64":
        return base64.b64decode(body.encode("utf-8", "surrogateescape"))
    return body.encode("utf-8", "surrogateescape")


def _task_problem(payload: dict[str, Any], accept: Collection[str]) -> str | None:
    """What keeps a kombu message from being a Celery task message (protocol 2), or None."""
    content_type = payload.get("content-type")
    if not isinstance(content_type, str) or content_type not in accept:
        allowed = ", ".join(sorted(accept))
        return f"its content type {content_type!r} is not one the workers accept ({allowed})"
    headers = payload.get("headers")
    if not isinstance(headers, dict):
        return "no Celery headers: 'headers' is missing or not an object"
    missing = [name for name in ("task", "id") if not isinstance(headers.get(name), str)]
    if missing:
        return f"Celery headers missing or not strings: {', '.join(missing)}"
    problem = header_problem(headers)
    if problem is not None:
        return problem
    encoding = payload.get("content-encoding") or "utf-8"
    if not isinstance(encoding, str):
        return "its content encoding is not a string"
    try:
        text = _body_bytes(payload).decode(encoding)
    except LookupError:
        return f"its content encoding {encoding!r} is not a known encoding"
    except (UnicodeDecodeError, TypeError) as exc:
        return f"its body is not {encoding} text ({exc})"
    try:
        body = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"its body does not decode as JSON ({exc})"
    if isinstance(body, dict):
        return None  # Celery's hybrid message (protocol 1 fields in the body)
    shape = isinstance(body, list) and len(body) == 3
    if not (shape and isinstance(body[0], list) and isinstance(body[1], dict) and isinstance(body[2], dict)):
        return "its body is not Celery's [args, kwargs, options]"
    return None


def diagnose(raw: bytes | str, *, accept: Collection[str] | None = None) -> str | None:
    """What is wrong with queue entry ``raw`` as a kombu message on the Redis transport and, with
    ``accept`` (the content types a worker accepts), as a Celery task message, in a few words;
    None when nothing is found."""
    text = bytes_to_str(raw)
    if not text.strip():
        return "the entry is empty"
    try:
        payload = loads(text)
    except RecursionError:
        return "its JSON is nested too deeply to read"
    except ValueError as exc:
        try:
            json.loads(text)
        except ValueError:
            return f"not JSON ({exc})"
        return f"its JSON holds a value kombu cannot read ({quoted(exc)})"
    except Exception as exc:
        return f"its JSON holds a value kombu cannot read ({quoted(exc)})"
    problem = envelope_problem(payload)
    if problem is None and accept is not None:
        problem = _task_problem(payload, accept)
    return problem
