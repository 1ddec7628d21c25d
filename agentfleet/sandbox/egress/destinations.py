"""A sandbox's declared network destinations, and the decision whether one request may go.

Each entry of ``SandboxSpec.network`` is one of:

- ``api.vendor.example``: that host, on the default ports (80 for http, 443 for https);
- ``api.vendor.example:8443``: that host on that port only (either scheme);
- ``*.vendor.example``: every subdomain at any depth, on the default ports, but not
  ``vendor.example`` itself (the credential domain rule of ``agentfleet.tools.vault``);
  ``*.vendor.example:8443`` the same on that port;
- an IP address (``[2001:db8::1]:8443`` with a port for IPv6).

Names are normalised like the SSRF guard's (lower case, IDNA, no trailing dot). Declaring a
destination does not open a private address: the SSRF guard still refuses one unless
``fetch.allow_private_hosts`` lists it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agentfleet.errors import ConfigError, ForbiddenDestination
from agentfleet.tools.ssrf import normalize_host
from agentfleet.tools.vault import domain_allows, normalize_domain_rule

__all__ = ["DEFAULT_PORTS", "Destination", "Destinations"]

DEFAULT_PORTS = frozenset({80, 443})


@dataclass(frozen=True)
class Destination:
    """One declared entry: a canonical host rule (``*.`` for subdomains) and its port (None:
    the default ports)."""

    rule: str
    port: int | None

    @classmethod
    def parse(cls, entry: str) -> Destination:
        """The entry ``entry``; ``ConfigError`` naming it when it is not a valid one."""
        text = entry.strip()
        host, port = _split_port(text, entry)
        if "://" in text or not host:
            raise ConfigError(
                f"sandbox network entry {entry!r} must be a host, '*.' and a domain, or either "
                "with ':port' (no scheme or path)"
            )
        return cls(rule=normalize_domain_rule(host), port=port)

    def allows(self, host: str, port: int) -> bool:
        """True when this entry admits the normalised ``host`` on ``port``."""
        if self.port is None and port not in DEFAULT_PORTS:
            return False
        if self.port is not None and port != self.port:
            return False
        return domain_allows(self.rule, host)

    def __str__(self) -> str:
        host = f"[{self.rule}]" if ":" in self.rule else self.rule
        return host if self.port is None else f"{host}:{self.port}"


def _split_port(text: str, entry: str) -> tuple[str, int | None]:
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ConfigError(f"sandbox network entry {entry!r}: expected ':port' after ']'")
        return host, _port(rest[1:], entry)
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, _port(port, entry)
    return text, None


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ConfigError(f"sandbox network entry {entry!r}: the port must be a number from 1 to 65535")
    return int(text)


class Destinations:
    """The declared entries of one sandbox; ``check`` decides a request's host and port."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.entries = tuple(Destination.parse(entry) for entry in entries)

    def allows(self, host: str, port: int) -> bool:
        """True when a declared entry admits ``host`` (raw or normalised) on ``port``."""
        try:
            normal = normalize_host(host)
        except ForbiddenDestination:
            return False
        return any(entry.allows(normal, port) for entry in self.entries)

    def declared(self) -> str:
        """The entries as the settings spell them, for messages (``none`` when empty)."""
        return ", ".join(str(entry) for entry in self.entries) or "none"
