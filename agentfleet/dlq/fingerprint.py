"""Fingerprints: failures that differ only in ids, numbers or URLs' queries group together."""

from __future__ import annotations

import re

from agentfleet.idempotency import stable_hash

__all__ = ["error_fingerprint", "normalise_message"]

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"), "<uuid>"),
    (re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+"), "<email>"),
    (re.compile(r"\?[^\s'\"<>]+"), "?<query>"),
    # Provider ids such as req_01AbC..., msg_..., toolu_...: a prefix, an underscore, a token.
    (re.compile(r"\b[A-Za-z]+_(?=\w*\d)\w{8,}\b"), "<id>"),
    (re.compile(r"\b(?=\w*\d)(?=\w*[A-Za-z])\w{16,}\b"), "<id>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
)

MAX_NORMALISED_CHARS = 300


def normalise_message(message: str) -> str:
    """``message`` with uuids, emails, URL queries, hex ids and numbers replaced by placeholders.

    ``"HTTP 503 for /items/8f3a9c2e1b?page=2"`` -> ``"HTTP <n> for /items/<hex>?<query>"``.
    Only the first line counts (tracebacks and response bodies follow it), cut to 300 chars.
    """
    text = message.strip().splitlines()[0] if message.strip() else ""
    for pattern, placeholder in _RULES:
        text = pattern.sub(placeholder, text)
    return text.strip()[:MAX_NORMALISED_CHARS]


def error_fingerprint(error_type: str, message: str) -> str:
    """A 12-hex-digit fingerprint of an error type and its normalised message."""
    return stable_hash([error_type, normalise_message(message)], length=12)
