"""The SSRF guard's decisions: which hosts and addresses a task may connect to.

Only ``http`` and ``https`` are allowed. A host is normalised (percent-decoding, IDNA, case,
one trailing dot), numeric spellings of IPv4 are read the way ``inet_aton`` and the WHATWG URL
standard read them (``2130706433``, ``0177.0.0.1``, ``0x7f.1``...), names are resolved, and
every resolved address must be globally routable unless ``fetch.allow_private_hosts`` opens
it. The caller then connects to one of the returned addresses and to nothing else, so a
second DNS answer can never be used to reach an address that was not checked.

Everything here is a pure function of its inputs and the injected resolver; the transport
that enforces these decisions on live requests is ``agentfleet.tools.guard``. How a host is
spelled and read is ``agentfleet.tools.host_spelling``; how a name is resolved, with a time
limit, is ``agentfleet.tools.resolution``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from agentfleet.errors import ConfigError, ForbiddenDestination
from agentfleet.tools.host_spelling import (
    ALLOWED_SCHEMES,
    Address,
    check_scheme,
    default_port,
    normalize_host,
    parse_ip_literal,
)
from agentfleet.tools.resolution import Resolver, resolve_addresses, system_resolver

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

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

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
        addresses = resolve_addresses(host, port, resolver, timeout_s)
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
