"""Reading a JSON request body within limits: its size in bytes and its nesting depth.

A body over ``max_bytes`` is refused as soon as that is known: from its declared
``Content-Length`` before anything is read, else while it streams in. JSON nested deeper than
``max_depth`` (objects and arrays) is refused whether the parser itself would give up (too
deep for Python's recursion limit) or not: what is accepted here must also survive every
later step (validation, hashing, Celery's serializer), which recurse as well. ``NaN``,
``Infinity`` and ``-Infinity`` (which Python's parser accepts) are not JSON, and are refused,
as is a number too large for a float (``1e309``).
A body the server stopped waiting for (``service.body_timeout_s``) is refused too.
"""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.requests import ClientDisconnect, Request

from agentfleet.errors import InvalidInput

__all__ = ["json_depth", "read_json_body"]

BAD_REQUEST = 400
TOO_LARGE = 413
UNPROCESSABLE = 422


def _too_large(limit: int) -> InvalidInput:
    return InvalidInput(
        f"the body is larger than service.max_body_bytes ({limit} bytes)", status_code=TOO_LARGE
    )


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; send finite numbers only")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a number; send finite numbers only")
    return value


def json_depth(document: Any) -> int:
    """How deeply objects and arrays nest in a parsed JSON ``document`` (a scalar is 0)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


async def read_json_body(request: Request, *, max_bytes: int, max_depth: int) -> Any:
    """The request's JSON document (an empty body is ``None``).

    Raises ``InvalidInput`` with ``status_code`` 413 when the body is over ``max_bytes``, and
    422 when it is not JSON or nests deeper than ``max_depth``.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    body = bytearray()
    try:
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_bytes:
                raise _too_large(max_bytes)
    except ClientDisconnect:
        raise InvalidInput("the body did not arrive in time", status_code=BAD_REQUEST) from None
    deep = InvalidInput(
        f"the JSON nests deeper than service.max_json_depth ({max_depth} levels)", status_code=UNPROCESSABLE
    )
    try:
        document = json.loads(body or b"null", parse_constant=_no_constants, parse_float=_finite)
    except RecursionError:
        raise deep from None
    except (ValueError, UnicodeDecodeError) as exc:
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        if isinstance(exc, UnicodeDecodeError):
            reason = "it is not UTF-8"
        raise InvalidInput(f"the body is not JSON: {reason}", status_code=UNPROCESSABLE) from None
    if json_depth(document) > max_depth:
        raise deep
    return document
