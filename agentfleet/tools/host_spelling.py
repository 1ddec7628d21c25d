"""How a URL's scheme and host are read: the allowed schemes, host normalisation, IP literals.

A host is normalised (percent-decoding, IDNA, case, one trailing dot); numeric spellings of
IPv4 are read the way ``inet_aton`` and the WHATWG URL standard read them (``2130706433``,
``0177.0.0.1``, ``0x7f.1``...), so that a host which a resolver would read as an address is
checked as that address (``agentfleet.tools.ssrf``). Pure functions.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import unquote

import idna

from agentfleet.errors import ForbiddenDestination

__all__ = [
    "ALLOWED_SCHEMES",
    "Address",
    "check_scheme",
    "default_port",
    "normalize_host",
    "parse_ip_literal",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

ALLOWED_SCHEMES = frozenset({"http", "https"})

_HOST_FORBIDDEN_CHARS = frozenset("/\\@#?[]<>^`{|} \t\r\n\x00")


def check_scheme(scheme: str) -> str:
    """The scheme in lower case, or ``ForbiddenDestination`` unless it is http or https."""
    lowered = scheme.lower()
    if lowered not in ALLOWED_SCHEMES:
        shown = f"the {lowered}: scheme" if lowered else "a URL without a scheme"
        raise ForbiddenDestination(f"refused {shown}; only http and https URLs may be fetched")
    return lowered


def default_port(scheme: str) -> int:
    """The TCP port a URL of ``scheme`` uses when it names none."""
    return 443 if scheme == "https" else 80


def normalize_host(raw: str) -> str:
    """The host as it is compared and resolved: ASCII, lower case, no brackets, no trailing dot.

    Percent-escapes are decoded and internationalised names are mapped with UTS 46 (so
    full-width digits and ideographic full stops become ASCII). IPv6 zone identifiers and
    characters that cannot be in a host are refused with ``ForbiddenDestination``.
    """
    host = raw
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = unquote(host)
    if "%" in host:
        raise ForbiddenDestination(f"refused host {raw!r}: IPv6 zone identifiers are not allowed")
    if any(ch in _HOST_FORBIDDEN_CHARS for ch in host):
        raise ForbiddenDestination(f"refused host {raw!r}: it holds characters a host cannot")
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise ForbiddenDestination("refused a URL with an empty host")
    if ":" in host:
        return host
    if not host.isascii():
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except idna.IDNAError as exc:
            raise ForbiddenDestination(f"refused host {raw!r}: not a valid name ({exc})") from None
        if host.endswith("."):
            host = host[:-1]
    return host


def _ipv4_part(part: str) -> int | None:
    if part[:2] in ("0x", "0X"):
        digits = part[2:]
        if not digits:
            return 0
        try:
            return int(digits, 16)
        except ValueError:
            return None
    if not part.isdigit() or not part.isascii():
        return None
    if len(part) > 1 and part.startswith("0"):
        try:
            return int(part, 8)
        except ValueError:
            return None
    return int(part, 10)


def _looks_numeric(part: str) -> bool:
    if part[:2] in ("0x", "0X"):
        return all(ch in "0123456789abcdefABCDEF" for ch in part[2:])
    return part.isascii() and part.isdigit()


def _parse_ipv4(host: str) -> ipaddress.IPv4Address | None:
    parts = host.split(".")
    if not parts[-1] or not _looks_numeric(parts[-1]):
        return None
    # A host whose last label is a number is an IPv4 address or nothing: a resolver would
    # read it as one, so it must not be treated as a name.
    problem = f"refused host {host!r}: it looks like an IPv4 address but is not a valid one"
    if len(parts) > 4 or any(not part for part in parts):
        raise ForbiddenDestination(problem)
    values = [_ipv4_part(part) for part in parts]
    if any(value is None for value in values):
        raise ForbiddenDestination(problem)
    numbers = [value for value in values if value is not None]
    *head, last = numbers
    if any(value > 255 for value in head) or last >= 256 ** (5 - len(numbers)):
        raise ForbiddenDestination(problem)
    total = 0
    for value in head:
        total = total * 256 + value
    total = total * 256 ** (5 - len(numbers)) + last
    return ipaddress.IPv4Address(total)


def parse_ip_literal(host: str) -> Address | None:
    """The address a normalised host spells, in any IPv4 or IPv6 form, or None for a name."""
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise ForbiddenDestination(f"refused host {host!r}: malformed IPv6 address") from None
    return _parse_ipv4(host)
