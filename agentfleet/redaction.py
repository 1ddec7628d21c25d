"""Keep secrets out of what agentfleet stores: dead letters, attempt errors, outcomes.

Two rules, applied together by a ``Redactor``:

- a mapping key that names a secret has its value replaced, at any depth. Keys match by
  words, not substrings: ``api_key`` matches ``openai_api_key`` and ``X-Api-Key``, ``token``
  matches ``access_token`` but not ``max_tokens``;
- a known secret value (a configured credential, an API key from the settings) is replaced
  wherever it appears inside any string, including tracebacks and error messages.

Values shorter than ``MIN_SECRET_CHARS`` are not searched for in free text: they would match
everywhere and leave nothing readable (a key that names them is still redacted).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MIN_SECRET_CHARS", "REDACTED", "Redactor", "key_words", "redact"]

REDACTED = "[REDACTED]"
MIN_SECRET_CHARS = 4

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SPLIT = re.compile(r"[^a-zA-Z0-9]+")


def key_words(name: str) -> tuple[str, ...]:
    """The lower-case words of a key: ``"openaiApi-Key"`` -> ``("openai", "api", "key")``."""
    return tuple(w.lower() for w in _SPLIT.split(_CAMEL.sub("_", name)) if w)


def _contains(words: tuple[str, ...], needle: tuple[str, ...]) -> bool:
    n = len(needle)
    return n > 0 and any(words[i : i + n] == needle for i in range(len(words) - n + 1))


@dataclass(frozen=True)
class Redactor:
    """Replaces secrets by ``[REDACTED]``; ``paths`` collects where it did (``a.b[2]``)."""

    keys: tuple[tuple[str, ...], ...] = ()
    values: tuple[str, ...] = ()
    _pattern: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def build(cls, keys: Iterable[str] = (), values: Iterable[str | None] = ()) -> Redactor:
        """A redactor for key names ``keys`` and secret ``values`` (empty ones are ignored)."""
        words = tuple(dict.fromkeys(w for w in (key_words(k) for k in keys) if w))
        secrets = tuple(
            sorted({v for v in values if v and len(v) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        )
        pattern = re.compile("|".join(re.escape(v) for v in secrets)) if secrets else None
        return cls(keys=words, values=secrets, _pattern=pattern)

    def learn(self, data: Any) -> Redactor:
        """This redactor, plus the values ``data`` holds under secret keys as known secrets.

        A task's input ``{"api_key": "sk-..."}`` makes ``"sk-..."`` a secret wherever it shows
        up later: in the error message or traceback of that same task.
        """
        found: list[str] = []
        self._collect(data, found)
        if not found:
            return self
        return Redactor.build([" ".join(words) for words in self.keys], [*self.values, *found])

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
        words = key_words(name)
        return any(_contains(words, needle) for needle in self.keys)

    def text(self, value: str) -> str:
        """``value`` with every known secret value replaced."""
        if self._pattern is None or not value:
            return value
        return self._pattern.sub(REDACTED, value)

    def value(self, data: Any, *, paths: list[str] | None = None, _at: str = "") -> Any:
        """A copy of ``data`` (JSON-like) with secrets replaced; redacted paths go to ``paths``."""
        if isinstance(data, Mapping):
            out: dict[str, Any] = {}
            for key, item in data.items():
                where = f"{_at}.{key}" if _at else str(key)
                if isinstance(key, str) and self.secret_key(key) and item not in (None, ""):
                    out[key] = REDACTED
                    if paths is not None:
                        paths.append(where)
                else:
                    out[key] = self.value(item, paths=paths, _at=where)
            return out
        if isinstance(data, list | tuple):
            return [self.value(item, paths=paths, _at=f"{_at}[{i}]") for i, item in enumerate(data)]
        if isinstance(data, str):
            cleaned = self.text(data)
            if cleaned != data and paths is not None:
                paths.append(_at or "(value)")
            return cleaned
        return data


def redact(data: Any, *, keys: Iterable[str] = (), values: Iterable[str | None] = ()) -> Any:
    """A copy of ``data`` with the values of secret ``keys`` and every secret ``values`` replaced."""
    return Redactor.build(keys, values).value(data)
