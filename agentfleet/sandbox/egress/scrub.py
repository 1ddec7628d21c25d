"""Keeping credential values out of what a destination sends back into a sandbox.

A destination may reflect a credential the proxy filled in: an echo service returns the
request's headers, an error page quotes the ``Authorization`` it refused, a login answer
repeats the token. The proxy therefore rewrites every response it relays (headers and body,
the body decoded from its ``Content-Encoding`` first) so that each credential value the
sandbox may name appears as its ``$CRED{name}`` placeholder instead, in these spellings:

- the value as it is, and percent-encoded (``quote`` and ``quote_plus``);
- its base64 text at each of the three byte alignments (``agentfleet.redaction.base64_cores``),
  for values long enough to have one: the core of the encoding is replaced, so a reflected
  ``Basic`` credential or a token inside a JSON Web Token no longer decodes to the value.

Other transformations (hashing, encryption, a custom encoding, JSON ``\\u`` escapes) are not
recognised; none is claimed. A body is rewritten as it streams: the last ``longest - 1``
bytes of each chunk are held back until the next one arrives, so a value split across two
chunks is still found.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from urllib.parse import quote, quote_plus

from agentfleet.redaction import MIN_SECRET_CHARS, base64_cores
from agentfleet.tools.vault import placeholder

__all__ = ["Reflections"]

ValueSource = Callable[[str], str]
"""``value(name)`` -> the credential's current value (raises when it cannot be read)."""


class Reflections:
    """The spellings of some credentials' values, each mapped to its placeholder."""

    def __init__(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        ordered = sorted({form: marker for form, marker in pairs if form}.items(), key=lambda p: -len(p[0]))
        self._pairs = ordered
        self.longest = max((len(form) for form, _ in ordered), default=0)

    @classmethod
    def of(cls, names: Iterable[str], value: ValueSource) -> Reflections:
        """The spellings of ``names``' current values; a value that cannot be read is skipped."""
        pairs: list[tuple[bytes, bytes]] = []
        for name in names:
            try:
                secret = value(name)
            except Exception:  # an unreadable source: there is no value to leak
                continue
            if len(secret) < MIN_SECRET_CHARS:
                continue
            marker = placeholder(name).encode("ascii")
            raw = secret.encode("utf-8")
            forms = {raw, quote(secret, safe="").encode(), quote_plus(secret, safe="").encode()}
            forms.update(base64_cores(raw))
            pairs.extend((form, marker) for form in forms)
        return cls(pairs)

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def replace(self, data: bytes) -> bytes:
        """``data`` with every known spelling replaced by its placeholder."""
        for form, marker in self._pairs:
            if form in data:
                data = data.replace(form, marker)
        return data

    def stream(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """``chunks`` rewritten, holding back enough bytes to catch a value cut between chunks."""
        if not self._pairs:
            yield from chunks
            return
        keep = self.longest - 1
        pending = b""
        for chunk in chunks:
            pending = self.replace(pending + chunk)
            if len(pending) > keep:
                cut = len(pending) - keep
                yield pending[:cut]
                pending = pending[cut:]
        if pending:
            yield self.replace(pending)
