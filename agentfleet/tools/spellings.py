"""Finding a secret value in the bytes of an outgoing request, whatever its spelling.

The guard uses this to refuse a request that carries a credential's value (not its
``$CRED{...}`` placeholder) to a host the credential is not allowed for: a value an allowed
host reflected into a redirect, a value a task copied from a response, a value in a body.

A value is found when it appears

- as it is;
- percent-encoded, in any mix of encoded and literal characters and either hex case, also
  encoded twice, and form-encoded (``+`` for a space): each part is decoded before it is
  searched;
- base64-encoded (standard or URL-safe alphabet): a whole ``Authorization`` or
  ``Proxy-Authorization`` credential is decoded and searched (so ``Basic user:value`` is
  found for a value of any length), and for values of at least ``MIN_BASE64_CHARS`` the
  base64 text of the value at each of the three byte alignments is searched for anywhere
  (``agentfleet.redaction.base64_cores``).

Other transformations (hashing, encryption, reversal, a custom encoding) are not detected:
no scanner can, and none is claimed.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from agentfleet.redaction import base64_cores

__all__ = ["Needles", "authorization_payloads", "decoded_forms"]

_DECODE_ROUNDS = 3
_AUTH_HEADERS = (b"authorization", b"proxy-authorization")


@dataclass(frozen=True)
class Needles:
    """What to search for one secret value: the value, and its base64 forms when long enough."""

    plain: bytes
    base64: tuple[bytes, ...]

    @classmethod
    def of(cls, value: str) -> Needles:
        raw = value.encode("utf-8")
        return cls(plain=raw, base64=tuple(base64_cores(raw)))

    def found_in(self, haystacks: Iterable[bytes]) -> bool:
        """True when any of ``haystacks`` (already decoded) holds the value in any form."""
        return any(self.plain in hay or any(core in hay for core in self.base64) for hay in haystacks)


def decoded_forms(data: bytes) -> Iterator[bytes]:
    """``data``, then each distinct result of percent-decoding it (and form-decoding it) again."""
    seen: list[bytes] = []
    for start in (data, data.replace(b"+", b" ")):
        current = start
        for _ in range(_DECODE_ROUNDS + 1):
            if current in seen:
                break
            seen.append(current)
            yield current
            if b"%" not in current:
                break
            current = unquote_to_bytes(current)


def _b64decode(token: bytes) -> bytes | None:
    padded = token + b"=" * (-len(token) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            return decode(padded)
        except (binascii.Error, ValueError):
            continue
    return None


def authorization_payloads(headers: Iterable[tuple[bytes, bytes]]) -> Iterator[bytes]:
    """The base64-decoded credentials of every ``Authorization``-style header in ``headers``."""
    for name, value in headers:
        if name.lower() not in _AUTH_HEADERS:
            continue
        for token in value.split():
            decoded = _b64decode(token)
            if decoded:
                yield decoded
