"""The SSRF guard's decisions: which hosts and addresses a task may connect to.

Only ``http`` and ``https`` are allowed. A host is normalised (percent-decoding, IDNA, case,
one trailing dot), numeric spellings of IPv4 are read the way ``inet_aton`` and the WHATWG URL
standard read them (``2130706433``, ``0177.0.0.1``, ``0x7f.1``...), names are resolved, and
every resolved address must be globally routable unless ``fetch.allow_private_hosts`` opens
it. The caller then connects to one of the returned addresses and to nothing else, so a
second DNS answer can never be used to reach an address that was not checked.

Everything here is a pure function of its inputs and the injected resolver; the transport
that enforces these decisions on live requests is ``agentfleet.tools.guard``.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import idna

from agentfleet.errors import ConfigError, ConnectionFailed, ForbiddenDestination, TaskTimeout

__all__ = [
    "ALLOWED_SCHEMES",
    "Address",
    "Allowlist",
    "Resolver",
    "Target",
    "blocked_reason",
    "check_host",
    "check_scheme",
    "default_port",
    "normalize_host",
    "parse_ip_literal",
    "precheck_url",
    "system_resolver",
]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

Resolver = Callable[[str, int], Sequence[str]]
"""``resolver(host, port)`` -> the host's addresses as strings, in connection order."""

ALLOWED_SCHEMES = frozenset({"http", "https"})

_V4 = ipaddress.IPv4Network
_V6 = ipaddress.IPv6Network

# Explicit tables rather than ``is_global``: its answers changed between Python releases,
# and a refusal should name the range that caused it.
_BLOCKED_V4: tuple[tuple[ipaddress.IPv4Network, str], ...] = (
    (_V4("0.0.0.0/8"), "'this network' range (0.0.0.0 reaches the local machine)"),
    (_V4("10.0.0.0/8"), "private range 10.0.0.0/8"),
    (_V4("100.64.0.0/10"), "carrier-grade NAT range 100.64.0.0/10"),
    (_V4("127.0.0.0/8"), "loopback range 127.0.0.0/8"),
    (_V4("169.254.0.0/16"), "link-local range 169.254.0.0/16 (cloud metadata lives here)"),
    (_V4("172.16.0.0/12"), "private range 172.16.0.0/12"),
    (_V4("192.0.0.0/24"), "IETF protocol assignments 192.0.0.0/24"),
    (_V4("192.0.2.0/24"), "documentation range 192.0.2.0/24"),
    (_V4("192.88.99.0/24"), "deprecated 6to4 relay anycast 192.88.99.0/24"),
    (_V4("192.168.0.0/16"), "private range 192.168.0.0/16"),
    (_V4("198.18.0.0/15"), "benchmarking range 198.18.0.0/15"),
    (_V4("198.51.100.0/24"), "documentation range 198.51.100.0/24"),
    (_V4("203.0.113.0/24"), "documentation range 203.0.113.0/24"),
    (_V4("224.0.0.0/4"), "multicast range 224.0.0.0/4"),
    (_V4("240.0.0.0/4"), "reserved range 240.0.0.0/4 (includes broadcast)"),
)

_NAT64 = _V6("64:ff9b::/96")
_SIXTOFOUR = _V6("2002::/16")
_GLOBAL_UNICAST_V6 = _V6("2000::/3")

# Checked in order; the first match names the reason. Ranges that embed an IPv4 address
# (mapped, NAT64, 6to4) are handled before this table by looking at the embedded address.
_BLOCKED_V6: tuple[tuple[ipaddress.IPv6Network, str], ...] = (
    (_V6("::/128"), "unspecified address ::"),
    (_V6("::1/128"), "loopback address ::1"),
    (_V6("::/96"), "deprecated IPv4-compatible range ::/96"),
    (_V6("::ffff:0:0:0/96"), "IPv4-translated range ::ffff:0:0:0/96"),
    (_V6("64:ff9b:1::/48"), "local-use NAT64 range 64:ff9b:1::/48"),
    (_V6("100::/64"), "discard-only range 100::/64"),
    (_V6("2001::/32"), "Teredo tunnelling range 2001::/32"),
    (_V6("2001:db8::/32"), "documentation range 2001:db8::/32"),
    (_V6("2001::/23"), "IETF protocol assignments 2001::/23"),
    (_V6("3fff::/20"), "documentation range 3fff::/20"),
    (_V6("fc00::/7"), "unique-local range fc00::/7"),
    (_V6("fe80::/10"), "link-local range fe80::/10"),
    (_V6("fec0::/10"), "deprecated site-local range fec0::/10"),
    (_V6("ff00::/8"), "multicast range ff00::/8"),
)

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


def _embedded_v4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "IPv4-mapped"
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "NAT64"
    if address.sixtofour is not None:
        return address.sixtofour, "6to4"
    return None


def blocked_reason(address: Address) -> str | None:
    """Why ``address`` is not a global unicast destination, or None when it is one."""
    if isinstance(address, ipaddress.IPv4Address):
        for network, reason in _BLOCKED_V4:
            if address in network:
                return reason
        return None
    embedded = _embedded_v4(address)
    if embedded is not None:
        inner, kind = embedded
        inner_reason = blocked_reason(inner)
        return f"{kind} form of {inner}, {inner_reason}" if inner_reason else None
    for network6, reason in _BLOCKED_V6:
        if address in network6:
            return reason
    if address not in _GLOBAL_UNICAST_V6:
        return "outside the global unicast range 2000::/3"
    return None


def _refusal(host: str, address: Address, reason: str, literal: bool) -> ForbiddenDestination:
    if literal:
        spelled = f"{host!r}" if host == str(address) else f"{host!r} ({address})"
        text = f"refused {spelled}: {reason}; to open it, list it in fetch.allow_private_hosts"
    else:
        text = (
            f"refused {host!r}: it resolves to {address} ({reason}); to open it, list the "
            "name or the address in fetch.allow_private_hosts"
        )
    return ForbiddenDestination(text, downstream=host)


def _is_local_name(host: str) -> bool:
    # RFC 6761: these names always mean this machine, whatever a resolver says.
    return host == "localhost" or host.endswith(".localhost")


class Allowlist:
    """``fetch.allow_private_hosts``: names, addresses and CIDR blocks opened on purpose.

    A name entry opens every address that exact name resolves to; an address or CIDR entry
    opens those addresses whatever name led to them. Entries are normalised like hosts.
    """

    def __init__(self, entries: Iterable[str]) -> None:
        self._names: set[str] = set()
        self._networks: list[Network] = []
        for entry in entries:
            self._add(entry)

    def _add(self, entry: str) -> None:
        text = entry.strip()
        if not text:
            raise ConfigError("fetch.allow_private_hosts: an entry is empty; remove it")
        try:
            self._networks.append(ipaddress.ip_network(text.strip("[]"), strict=False))
            return
        except ValueError:
            pass
        try:
            host = normalize_host(text)
            literal = parse_ip_literal(host)
        except ForbiddenDestination as exc:
            raise ConfigError(
                f"fetch.allow_private_hosts: {entry!r} is not a host name, address or CIDR "
                f"block ({exc.message})"
            ) from None
        if literal is not None:
            self._networks.append(ipaddress.ip_network(literal))
        else:
            self._names.add(host)

    def opens_host(self, host: str) -> bool:
        """True when the normalised name ``host`` is listed by name."""
        return host in self._names

    def opens_address(self, address: Address) -> bool:
        """True when ``address`` (or the IPv4 address it embeds) is in a listed block."""
        candidates: list[Address] = [address]
        if isinstance(address, ipaddress.IPv6Address):
            embedded = _embedded_v4(address)
            if embedded is not None:
                candidates.append(embedded[0])
        return any(
            candidate.version == network.version and candidate in network
            for candidate in candidates
            for network in self._networks
        )


@dataclass(frozen=True)
class Target:
    """A checked destination. Connect to ``addresses`` (in order) and to nothing else.

    ``host`` is the normalised name (or address) from the URL, for the ``Host`` header, TLS
    server name and credential rules. ``opened_by_allowlist`` is True when any address was
    admitted only because ``fetch.allow_private_hosts`` opens it.
    """

    scheme: str
    host: str
    port: int
    addresses: tuple[Address, ...]
    is_ip_literal: bool
    opened_by_allowlist: bool


def system_resolver(host: str, port: int) -> list[str]:
    """Addresses of ``host`` from ``getaddrinfo``, in the order the system prefers them."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


_executor_lock = threading.Lock()
_executor: tuple[int, ThreadPoolExecutor] | None = None


def _lookup_pool() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        # A pool inherited through fork has no threads behind it: make a fresh one per process.
        if _executor is None or _executor[0] != os.getpid():
            _executor = (os.getpid(), ThreadPoolExecutor(8, thread_name_prefix="af-dns"))
        return _executor[1]


def _resolve(host: str, port: int, resolver: Resolver, timeout_s: float | None) -> list[Address]:
    try:
        if timeout_s is None:
            answers = list(resolver(host, port))
        else:
            # getaddrinfo cannot be interrupted, so it runs aside and is abandoned on timeout.
            answers = list(_lookup_pool().submit(resolver, host, port).result(timeout_s))
    except FutureTimeout:
        raise TaskTimeout(f"resolving {host!r} took longer than {timeout_s:g} s") from None
    except OSError as exc:
        raise ConnectionFailed(f"could not resolve {host!r}: {exc}", downstream=host) from None
    addresses: list[Address] = []
    for answer in answers:
        try:
            addresses.append(ipaddress.ip_address(answer.split("%", 1)[0]))
        except ValueError:
            raise ForbiddenDestination(
                f"refused {host!r}: the resolver answered {answer!r}, which is not an address"
            ) from None
    if not addresses:
        raise ConnectionFailed(f"could not resolve {host!r}: no addresses", downstream=host)
    return addresses


def _connectable(address: Address) -> Address:
    # An IPv4-mapped IPv6 address reaches the IPv4 host; connect to that directly.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def check_host(
    host: str,
    port: int,
    *,
    scheme: str = "http",
    allowlist: Allowlist,
    resolver: Resolver = system_resolver,
    timeout_s: float | None = None,
) -> Target:
    """Resolve a normalised ``host`` and check every address; the ``Target`` to connect to.

    Raises ``ForbiddenDestination`` when any address is not global and not opened by the
    allowlist, ``ConnectionFailed`` when the name does not resolve, and ``TaskTimeout`` when
    resolution takes longer than ``timeout_s`` seconds (None waits as long as the resolver).
    """
    literal = parse_ip_literal(host)
    name_open = literal is None and allowlist.opens_host(host)
    if literal is not None:
        addresses = [literal]
    elif _is_local_name(host) and not name_open:
        raise ForbiddenDestination(
            f"refused {host!r}: localhost names always mean this machine; to open it, list "
            "the name in fetch.allow_private_hosts"
        )
    else:
        addresses = _resolve(host, port, resolver, timeout_s)
    opened = False
    for address in addresses:
        reason = blocked_reason(address)
        if reason is None:
            continue
        if name_open or allowlist.opens_address(address):
            opened = True
            continue
        raise _refusal(host, address, reason, literal is not None)
    ordered: list[Address] = []
    for address in map(_connectable, addresses):
        if address not in ordered:
            ordered.append(address)
    return Target(
        scheme=scheme,
        host=host,
        port=port,
        addresses=tuple(ordered),
        is_ip_literal=literal is not None,
        opened_by_allowlist=opened,
    )


def precheck_url(url: str, allowlist: Allowlist) -> None:
    """Refuse ``url`` early when its scheme or literal host is forbidden, without any DNS.

    Catches spellings an HTTP client would reject before its transport sees them (such as
    ``0177.0.0.1``). Names are left to the transport guard, which resolves and pins them.
    """
    try:
        parts = urlsplit(url.strip())
        raw_host = parts.hostname
        raw_netloc = parts.netloc
    except ValueError as exc:
        raise ForbiddenDestination(f"refused an unparseable URL ({exc})") from None
    check_scheme(parts.scheme)
    if raw_host is None:
        raise ForbiddenDestination("refused a URL without a host")
    # urlsplit lowercases and strips brackets but keeps what follows a zone '%'.
    bracketed = "[" in raw_netloc
    host = normalize_host(f"[{raw_host}]" if bracketed else raw_host)
    literal = parse_ip_literal(host)
    if literal is not None:
        reason = blocked_reason(literal)
        if reason is not None and not allowlist.opens_address(literal):
            raise _refusal(host, literal, reason, True)
    elif _is_local_name(host) and not allowlist.opens_host(host):
        raise ForbiddenDestination(
            f"refused {host!r}: localhost names always mean this machine; to open it, list "
            "the name in fetch.allow_private_hosts"
        )
