"""Idempotency keys: stable hashes of inputs, and each item's default key."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "default_item_key", "node_key", "stable_hash", "stage_key", "text_hash"]


def canonical_json(value: Any, *, finite: bool = False) -> str:
    """JSON with sorted keys and no spaces: the same value always gives the same text.

    Raises ``TypeError`` for values JSON cannot hold; with ``finite``, ``ValueError`` for NaN
    and the infinities (which Python writes as ``NaN`` and ``Infinity``, outside JSON).
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=not finite)


def stable_hash(value: Any, *, length: int = 16) -> str:
    """A hex digest of ``value``'s canonical JSON that is the same in every process and run."""
    return text_hash(canonical_json(value), length=length)


def text_hash(text: str, *, length: int = 16) -> str:
    """``stable_hash`` of a value whose canonical JSON is ``text`` (already made)."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()[:length]


def default_item_key(run_id: str, index: int, inputs: Any) -> str:
    """The default idempotency key: the run, the item's index and a hash of its input.

    Redelivery, requeue and resume inside one run find the stored outcome; a new run of the
    same inputs has another run id, so it runs again.
    """
    return f"{run_id}:{index}:{stable_hash(inputs)}"


def stage_key(key: str, stage: int, stages: int) -> str:
    """The key a pipeline stage stores its own result under; the last stage uses ``key``."""
    return key if stage >= stages - 1 else f"{key}#s{stage}"


def node_key(key: str, node: str) -> str:
    """The key a step of a dependency graph stores its own result under."""
    return f"{key}#n:{node}"
