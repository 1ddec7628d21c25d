"""Redaction of secrets from anything that is about to be stored or shown.

``redact`` walks a JSON-like value (dicts, lists, strings, numbers) or a plain string such as
a traceback. It replaces every occurrence of a known secret value (also in its
percent-encoded forms), the value of every key that names a secret (``password``,
``api_key``, ``X-Api-Key``, ``access_token``...) and, inside strings, ``key=value``,
``key: value`` and ``"key": "value"`` forms of the same keys.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import quote, quote_plus

__all__ = ["DEFAULT_REDACT_KEYS", "REDACTED", "key_is_secret", "redact", "redact_text"]

REDACTED = "[REDACTED]"

DEFAULT_REDACT_KEYS: tuple[str, ...] = (
    "api_key",
    "apikey",
    "password",
    "passwd",
    "secret",
    "token",
    "authorization",
    "cookie",
)


def _norm(key: str) -> str:
    return key.strip().lower().replace("-", "_")


def key_is_secret(key: str, redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS) -> bool:
    """True when ``key`` is one of ``redact_keys`` or has one as a ``_``/``-`` separated part.

    ``X-Api-Key``, ``access_token`` and ``password_hash`` match; ``max_tokens`` does not.
    """
    name = _norm(key)
    for raw in redact_keys:
        word = _norm(raw)
        if not word:
            continue
        if name == word or name.startswith(word + "_") or name.endswith("_" + word) or f"_{word}_" in name:
            return True
    return False


@lru_cache(maxsize=32)
def _pair_pattern(redact_keys: tuple[str, ...]) -> re.Pattern[str] | None:
    words = [_norm(k) for k in redact_keys if _norm(k)]
    if not words:
        return None
    alternatives = "|".join(
        "[_-]".join(re.escape(part) for part in word.split("_"))
        for word in sorted(words, key=len, reverse=True)
    )
    key = rf"(?:[a-z0-9]+[_-])*(?:{alternatives})(?:[_-][a-z0-9]+)*"
    quoted = r"(?P<oq>[\"'])(?P<qv>(?:\\.|(?!(?P=oq))[^\n])*)(?P=oq)"
    bare = r"(?P<bv>(?:(?:bearer|basic|token|digest)[ \t]+)?[^\s,;&'\"{}\[\]()<>]+)"
    return re.compile(
        rf"(?<![a-z0-9_-])(?P<key>{key})(?P<kq>[\"']?)(?P<sep>[ \t]*[:=][ \t]*)(?:{quoted}|{bare})",
        re.IGNORECASE,
    )


def _mask_pair(match: re.Match[str]) -> str:
    head = match.group("key") + match.group("kq") + match.group("sep")
    if match.group("oq") is not None:
        quote_char = match.group("oq")
        return f"{head}{quote_char}{REDACTED}{quote_char}"
    return head + REDACTED


def _variants(secret_values: Iterable[str]) -> list[str]:
    found: set[str] = set()
    for value in secret_values:
        if not value:
            continue
        found.update({value, quote(value, safe=""), quote_plus(value, safe="")})
    # Longest first, so a secret that contains another is replaced whole.
    return sorted(found, key=len, reverse=True)


def _text(text: str, variants: list[str], pattern: re.Pattern[str] | None) -> str:
    for value in variants:
        if value in text:
            text = text.replace(value, REDACTED)
    if pattern is not None:
        text = pattern.sub(_mask_pair, text)
    return text


def redact_text(
    text: str,
    secret_values: Iterable[str] = (),
    redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS,
) -> str:
    """``text`` with secret values and the values of secret-named keys replaced."""
    return _text(text, _variants(secret_values), _pair_pattern(tuple(redact_keys)))


def _walk(obj: Any, variants: list[str], keys: tuple[str, ...], pattern: re.Pattern[str] | None) -> Any:
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    if isinstance(obj, str):
        return _text(obj, variants, pattern)
    if isinstance(obj, bytes | bytearray):
        return _text(bytes(obj).decode("utf-8", "replace"), variants, pattern)
    if isinstance(obj, Mapping):
        result: dict[Any, Any] = {}
        for key, value in obj.items():
            clean_key = _walk(key, variants, keys, pattern)
            if isinstance(key, str) and key_is_secret(key, keys):
                result[clean_key] = REDACTED
            else:
                result[clean_key] = _walk(value, variants, keys, pattern)
        return result
    if isinstance(obj, list | tuple | set | frozenset):
        items = [_walk(item, variants, keys, pattern) for item in obj]
        return tuple(items) if isinstance(obj, tuple) else items
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return _walk(dump(mode="json"), variants, keys, pattern)
    # Anything else is stored as text, so it is redacted as text.
    return _text(str(obj), variants, pattern)


def redact(
    obj: Any,
    secret_values: Iterable[str] = (),
    redact_keys: Iterable[str] = DEFAULT_REDACT_KEYS,
) -> Any:
    """A copy of ``obj`` with secrets replaced by ``[REDACTED]``.

    ``obj`` is a JSON-like value or a string (a traceback, a log line). Dicts keep their
    keys; the value of a key that names a secret is replaced whole, whatever its type. Lists
    stay lists, tuples stay tuples, sets become lists, pydantic models become dicts, bytes
    and other objects become their (redacted) text. The input is never modified.
    """
    keys = tuple(redact_keys)
    return _walk(obj, _variants(secret_values), keys, _pair_pattern(keys))
