"""Keep secrets out of what agentfleet stores or shows: dead letters, errors, logs, tracebacks.

Four rules, applied together by a ``Redactor``:

- a mapping key that names a secret has its value replaced, whatever its type, at any depth.
  Keys match by words, not substrings: ``api_key`` matches ``openai_api_key`` and
  ``X-Api-Key``, ``token`` matches ``access_token`` but not ``max_tokens``;
- inside free text, the ``key=value``, ``key: value`` and ``"key": "value"`` forms of those
  same keys lose their values (a header in a traceback, a query parameter in a URL); prose is
  not a pair: after ``key:``, one plain lower-case word that a sentence goes on from ("the
  token: read it from the environment") is a word, not a secret, and stays;
- a known secret value (a configured credential, an API key from the settings) is replaced
  wherever it appears in any string, also in its percent-encoded spellings and, for values
  of at least ``MIN_BASE64_CHARS``, inside base64 text (a Basic auth header echoed back);
- the password of any URL in free text (``redis://:password@host``) is replaced, known or
  not.

Values shorter than ``MIN_SECRET_CHARS`` are not searched for in free text: they would match
everywhere and leave nothing readable (a key that names them is still redacted).
"""

from __future__ import annotations

import base64
import functools
import re
import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, quote_plus, unquote

__all__ = [
    "DEFAULT_SECRET_KEYS",
    "MIN_BASE64_CHARS",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "Redactor",
    "base64_cores",
    "key_words",
    "redact",
    "shown_repr",
]

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 4
MIN_BASE64_CHARS = 12
"""Secrets shorter than this (bytes) are not looked for inside base64 text: the part of
their base64 form that does not depend on the neighbouring bytes is too short to be told
from ordinary text."""
SHOWN_REPR_MAX_CHARS = 1024

DEFAULT_SECRET_KEYS: tuple[str, ...] = (
    "api_key",
    "apikey",
    "password",
    "passwd",
    "secret",
    "token",
    "authorization",
    "cookie",
)

# A URL's userinfo password: scheme, "://", an optional user, ":", the password, "@". A '/'
# ends the match, so a path holding '@' is not taken for userinfo; a password with a raw
# '/' makes an invalid URL, and configured passwords are masked by value anyway.
_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/?#@\[\]]*:)(?P<pw>[^\s@/]+)@")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^a-zA-Z0-9]+")


def key_words(name: str) -> tuple[str, ...]:
    """The lower-case words of a key: ``"openaiApi-Key"`` -> ``("openai", "api", "key")``."""
    return tuple(w.lower() for w in _SPLIT.split(_CAMEL.sub("_", name)) if w)


def _contains(words: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    n = len(needle)
    return n > 0 and any(words[i : i + n] == needle for i in range(len(words) - n + 1))


# Every input and result of every item passes its mapping keys through here, and the same few
# names come back item after item: the verdict is remembered instead of splitting them again.
@functools.lru_cache(maxsize=4096)
def _names_a_secret(keys: tuple[tuple[str, ...], ...], name: str) -> bool:
    words = key_words(name)
    return any(_contains(words, needle) for needle in keys)


def _pair_pattern(keys: tuple[tuple[str, ...], ...]) -> re.Pattern[str] | None:
    # A key in text: its words joined by _ or - (or nothing, for camelCase), with any other
    # words around them, then a separator and a value (quoted, or up to a delimiter).
    if not keys:
        return None
    needles = sorted(("[_-]?".join(re.escape(w) for w in words) for words in keys), key=len, reverse=True)
    word = r"[a-z0-9]+"
    key = rf"(?:{word}[_-])*(?:{'|'.join(needles)})(?:[_-]{word})*"
    quoted = r"(?P<oq>[\"'])(?P<qv>(?:\\.|(?!(?P=oq))[^\n])*)(?P=oq)"
    bare = r"(?P<bv>(?:(?:bearer|basic|token|digest)[ \t]+)?[^\s,;&'\"{}\[\]()<>]+)"
    return re.compile(
        rf"(?<![a-z0-9_-])(?P<key>{key})(?P<kq>[\"']?)(?P<sep>[ \t]*[:=][ \t]*)(?:{quoted}|{bare})",
        re.IGNORECASE,
    )


# A word of prose: letters, lower case but for the first, short enough to be in a dictionary.
_PROSE_WORD = re.compile(r"[A-Za-z][a-z]{0,11}")
# ...that a sentence goes on from: a space, then another word.
_SENTENCE_GOES_ON = re.compile(r"[ \t]+[A-Za-z]")


def _is_prose(match: re.Match[str]) -> bool:
    """A ``key: word ...`` that is a sentence (an ``=`` or a quoted value never is)."""
    value = match.group("bv")
    return (
        value is not None
        and "=" not in match.group("sep")
        and _PROSE_WORD.fullmatch(value) is not None
        and _SENTENCE_GOES_ON.match(match.string, match.end()) is not None
    )


def _mask_pair(match: re.Match[str]) -> str:
    if _is_prose(match):
        return match.group(0)
    head = match.group("key") + match.group("kq") + match.group("sep")
    quote_char = match.group("oq")
    if quote_char is not None:
        return f"{head}{quote_char}{REDACTED}{quote_char}"
    return head + REDACTED


def base64_cores(value: bytes) -> list[bytes]:
    """The base64 text every encoding of ``value`` contains, whatever surrounds it.

    For each of the three byte alignments, the characters of ``base64(prefix + value +
    suffix)`` that depend on ``value`` alone (neither end mixes in a neighbour's bits), in the
    standard and the URL-safe alphabet. Empty below ``MIN_BASE64_CHARS``.
    """
    if len(value) < MIN_BASE64_CHARS:
        return []
    cores: list[bytes] = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + value).rstrip(b"=")
        front = (0, 2, 3)[offset]
        back = 1 if (offset + len(value)) % 3 else 0
        core = encoded[front : len(encoded) - back]
        cores.append(core)
        cores.append(core.replace(b"+", b"-").replace(b"/", b"_"))
    return list(dict.fromkeys(cores))


_ESCAPE = re.compile(r"%[0-9A-F]{2}")


def _spellings(values: Iterable[str]) -> tuple[str, ...]:
    found: set[str] = set()
    for value in values:
        encoded = {quote(value, safe=""), quote_plus(value, safe="")}
        # Percent escapes in either hex case (plain literals keep the search fast).
        encoded |= {_ESCAPE.sub(lambda m: m.group().lower(), form) for form in encoded}
        found.update({value, unquote(value), *encoded})
        found.update(core.decode("ascii") for core in base64_cores(value.encode("utf-8")))
    # Longest first, so a secret that contains another is replaced whole.
    return tuple(sorted(found, key=len, reverse=True))


@dataclass(frozen=True)
class Redactor:
    """Replaces secrets by ``[REDACTED]``; ``value(..., paths=[])`` collects where (``a.b[2]``)."""

    keys: tuple[tuple[str, ...], ...] = ()
    values: tuple[str, ...] = ()
    _values_re: re.Pattern[str] | None = field(default=None, repr=False, compare=False)
    _pairs_re: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(cls, keys: Iterable[str] = DEFAULT_SECRET_KEYS, values: Iterable[str | None] = ()) -> Redactor:
        """A redactor for key names ``keys`` and secret ``values`` (empty and short ones ignored)."""
        words = tuple(dict.fromkeys(w for w in (key_words(k) for k in keys) if w))
        secrets = tuple(
            sorted({v for v in values if v and len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        )
        spelled = _spellings(secrets)
        values_re = re.compile("|".join(re.escape(v) for v in spelled)) if spelled else None
        return cls(keys=words, values=secrets, _values_re=values_re, _pairs_re=_pair_pattern(words))

    def learn(self, data: Any) -> Redactor:
        """This redactor, plus the values ``data`` holds under secret keys as known secrets.

        A task's input ``{"api_key": "sk-..."}`` makes ``"sk-..."`` a secret wherever it shows
        up later: in the error message or traceback of that same task.
        """
        found: list[str] = []
        self._collect(data, found)
        if not found:
            return self
        return Redactor.build(["_".join(words) for words in self.keys], [*self.values, *found])

    def _collect(self, data: Any, found: list[str]) -> None:
        if isinstance(data, Mapping):
            for key, item in data.items():
                if isinstance(key, str) and self.secret_key(key):
                    found.extend(str(v) for v in (item if isinstance(item, list | tuple) else [item]) if v)
                else:
                    self._collect(item, found)
        elif isinstance(data, list | tuple):
            for item in data:
                self._collect(item, found)

    def secret_key(self, name: str) -> bool:
        """True when a mapping key ``name`` names a secret."""
        return _names_a_secret(self.keys, name)

    def text(self, value: str) -> str:
        """``value`` with known secret values and the values of secret-named keys replaced."""
        if not value:
            return value
        if self._values_re is not None:
            value = self._values_re.sub(REDACTED, value)
        # A key-value pair needs its separator: most strings have none and skip the search.
        if self._pairs_re is not None and (":" in value or "=" in value):
            value = self._pairs_re.sub(_mask_pair, value)
        if "://" not in value:
            return value
        return _URL_PASSWORD.sub(rf"\g<head>{REDACTED}@", value)

    def value(self, data: Any, *, paths: list[str] | None = None, _at: str = "") -> Any:
        """A redacted copy of ``data``; the paths of what was redacted go to ``paths``.

        Dicts keep their (redacted) keys, lists stay lists and tuples tuples; sets become
        lists, pydantic models dicts, and bytes and other objects their redacted text. The
        input is never modified.
        """
        if data is None or isinstance(data, bool | int | float):
            return data
        if isinstance(data, str):
            cleaned = self.text(data)
            if cleaned != data and paths is not None:
                paths.append(_at or "(value)")
            return cleaned
        if isinstance(data, Mapping):
            out: dict[Any, Any] = {}
            for key, item in data.items():
                where = f"{_at}.{key}" if _at else str(key)
                clean_key = self.text(key) if isinstance(key, str) else key
                if isinstance(key, str) and self.secret_key(key) and item not in (None, ""):
                    out[clean_key] = REDACTED
                    if paths is not None:
                        paths.append(where)
                else:
                    out[clean_key] = self.value(item, paths=paths, _at=where)
            return out
        if isinstance(data, list | tuple | set | frozenset):
            items = [self.value(item, paths=paths, _at=f"{_at}[{i}]") for i, item in enumerate(data)]
            return tuple(items) if isinstance(data, tuple) else items
        if isinstance(data, bytes | bytearray):
            return self.value(bytes(data).decode("utf-8", "replace"), paths=paths, _at=_at)
        dump = getattr(data, "model_dump", None)
        if callable(dump):
            return self.value(dump(mode="json"), paths=paths, _at=_at)
        return self.value(str(data), paths=paths, _at=_at)


def redact(data: Any, *, keys: Iterable[str] = DEFAULT_SECRET_KEYS, values: Iterable[str | None] = ()) -> Any:
    """A copy of ``data`` with the values of secret ``keys`` and every secret ``values`` replaced."""
    return Redactor.build(keys, values).value(data)


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 4
_SHOWN.maxdict = _SHOWN.maxlist = _SHOWN.maxtuple = 20
_SHOWN.maxstring = 200
_SHOWN.maxother = 200


def shown_repr(data: Any, redactor: Redactor, *, max_chars: int = SHOWN_REPR_MAX_CHARS) -> str:
    """A short repr of ``data`` for display (a task's arguments in Flower), secrets redacted.

    ``data`` is redacted whole before it is cut, so a cut never shows part of a secret:
    nesting beyond 4 levels, more than 20 items and strings beyond 200 characters are
    elided, and the text is cut at ``max_chars``.
    """
    text = _SHOWN.repr(redactor.value(data))
    return text if len(text) <= max_chars else text[: max_chars - 3] + "..."
