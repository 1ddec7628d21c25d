"""The dead letter of a malformed queue entry: the entry as text, why it was taken out, and what
it named of itself (task, task id, and the item it belongs to, when it says).

The entry is kept as it was found, as text, with two changes so that it shows no secret: a
kombu envelope's base64 body is shown decoded (``"body (decoded)"``; secrets under named keys
are only found in the clear), and the whole goes through the redactor (secret-named keys,
known secret values, URL passwords). Then it is cut to ``keep_bytes`` bytes of UTF-8: after the
redaction, so a cut never shows part of a secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from typing import Any

from agentfleet.dlq.fingerprint import error_fingerprint
from agentfleet.dlq.model import DeadLetter, dead_letter_id
from agentfleet.errors import MalformedMessage
from agentfleet.redaction import Redactor

__all__ = ["envelope_of", "malformed_dead_letter", "shown_entry"]

#: Longest reason a malformed dead letter keeps, in characters.
MAX_REASON_CHARS = 2000


def envelope_of(raw: bytes) -> dict[str, Any] | None:
    """``raw`` parsed as a JSON object (a kombu envelope, most likely), or None."""
    try:
        found = json.loads(raw.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def _decoded_body(envelope: dict[str, Any]) -> dict[str, Any]:
    properties = envelope.get("properties")
    body = envelope.get("body")
    encoding = properties.get("body_encoding") if isinstance(properties, dict) else None
    if encoding != "base64" or not isinstance(body, str):
        return envelope
    try:
        text = base64.b64decode(body, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return envelope  # shown as it is: the base64 text is what is wrong with it
    try:
        decoded: Any = json.loads(text)
    except (ValueError, RecursionError):
        decoded = text
    shown = {key: value for key, value in envelope.items() if key != "body"}
    shown["body (decoded)"] = decoded
    return shown


def _cut(text: str, keep_bytes: int, size: int) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= keep_bytes:
        return text
    return data[:keep_bytes].decode("utf-8", "ignore") + f" ... [cut: the entry was {size} bytes]"


def shown_entry(raw: bytes, redactor: Redactor, keep_bytes: int) -> str:
    """``raw`` as text a dead letter may keep (see the module docstring)."""
    envelope = envelope_of(raw)
    if envelope is None:
        shown = redactor.text(raw.decode("utf-8", "backslashreplace"))
    else:
        shown = json.dumps(redactor.value(_decoded_body(envelope)), ensure_ascii=False, default=str)
    return _cut(shown, keep_bytes, len(raw))


def _named(envelope: dict[str, Any] | None, field: str) -> str:
    headers = envelope.get("headers") if envelope is not None else None
    value = headers.get(field) if isinstance(headers, dict) else None
    return value if isinstance(value, str) else ""


def malformed_dead_letter(
    raw: bytes,
    reason: str,
    *,
    queue: str,
    worker: str,
    redactor: Redactor,
    keep_bytes: int,
    item: dict[str, Any] | None = None,
    now: float | None = None,
) -> DeadLetter:
    """The dead letter of queue entry ``raw``, taken out of ``queue`` by ``worker`` for
    ``reason``. ``item`` holds the run fields the entry named of itself (``run_id``,
    ``item_key``, ``index``, ``idempotency_key``), if any. Its id comes from the entry's bytes:
    the same entry found twice is one dead letter."""
    now = time.time() if now is None else now
    envelope = envelope_of(raw)
    error = redactor.text(reason)[:MAX_REASON_CHARS]
    error_type = MalformedMessage.__name__
    fields = {"run_id": "", "item_key": "", "index": 0, "idempotency_key": "", **(item or {})}
    return DeadLetter(
        id=dead_letter_id("malformed:" + hashlib.sha256(raw).hexdigest()),
        task_name=redactor.text(_named(envelope, "task")),
        task_id=redactor.text(_named(envelope, "id")),
        queue=queue or None,
        error_type=error_type,
        error=error,
        category=MalformedMessage.category,
        fingerprint=error_fingerprint(error_type, error),
        first_failure_at=now,
        last_failure_at=now,
        dead_lettered_at=now,
        worker=worker,
        raw_message=shown_entry(raw, redactor, keep_bytes),
        **fields,
    )
