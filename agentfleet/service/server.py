"""The HTTP server of ``agentfleet serve`` and ``agentfleet mcp --transport http``: uvicorn,
made to shed slow and greedy clients.

uvicorn by itself closes a connection idle after a response (``keepalive_s``), answers 503
past ``max_connections`` and nothing more: a client that trickles a request's headers or
body a byte at a time holds its connection for ever. The protocol here (uvicorn's h11
protocol, given through its ``http=`` option) adds:

- a header deadline: a request's headers must be complete within ``header_timeout_s`` of the
  connection opening, or of the previous response;
- a body deadline: its body must be complete within ``body_timeout_s`` of its headers;
- a cap per client address: past ``max_connections_per_client`` open connections, a new one
  from that address is closed at once (a trusted proxy, which carries many clients, has none).

A connection past a deadline is closed (logged with its address). ``X-Forwarded-For`` is
believed only from ``trusted_proxies``; otherwise the peer's address is the client's, so a
client cannot name itself another address to escape its cap or its sign-in lockout.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentfleet.access import client_key
from agentfleet.config import ServiceSettings, Settings

__all__ = ["banner", "hardened_protocol", "service_server"]

log = logging.getLogger("agentfleet.service.server")


def hardened_protocol(service: ServiceSettings) -> type[asyncio.Protocol]:
    """An h11 protocol class with the deadlines and the per-client cap of ``service``."""

    class SheddingProtocol(_Shedding):
        service_settings = service
        trusted_proxies = frozenset(service.trusted_proxies)
        open_by_client: ClassVar[Counter[str]] = Counter()

    return SheddingProtocol


class _Shedding(H11Protocol):
    """uvicorn's h11 protocol with deadlines and a per-client cap; ``hardened_protocol`` makes
    a class of it for one ``ServiceSettings``, whose connections share one count by client."""

    service_settings: ClassVar[ServiceSettings]
    trusted_proxies: ClassVar[frozenset[str]]
    open_by_client: ClassVar[Counter[str]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._who = ""  # the address this connection counts under ("" for a proxy's)
        self._name = ""
        self._watched: Any = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        service, open_by_client = self.service_settings, self.open_by_client
        peer = self.client[0] if self.client else None
        self._name = client_key(peer)
        if peer in self.trusted_proxies:
            self._arm(service.header_timeout_s, "its request's headers")
            return
        self._who = self._name
        open_by_client[self._who] += 1
        if open_by_client[self._who] > service.max_connections_per_client:
            log.info("closed a connection from %s: it has %d open", self._who, open_by_client[self._who] - 1)
            transport.close()
            return
        self._arm(service.header_timeout_s, "its request's headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._who:
            self.open_by_client[self._who] -= 1
            if self.open_by_client[self._who] <= 0:
                del self.open_by_client[self._who]
            self._who = ""
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is None or cycle is self._watched:
            if cycle is not None and not cycle.more_body:
                self._disarm()
            return
        # A new request's headers arrived: now its body, if it has one, runs on a deadline.
        self._watched = cycle
        self._disarm()
        if cycle.more_body:
            self._arm(self.service_settings.body_timeout_s, "its request's body")

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm(self.service_settings.header_timeout_s, "its next request's headers")

    def _arm(self, timeout_s: float, what: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(timeout_s, self._expire, timeout_s, what)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, timeout_s: float, what: str) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            log.info("closed a connection from %s: %s took over %g s", self._name, what, timeout_s)
            self.transport.close()


def service_server(
    app: Any, service: ServiceSettings, *, host: str, port: int, log_level: str
) -> uvicorn.Server:
    """The uvicorn server for ``app`` with ``service``'s limits; its log handlers (set up by
    its config) are filtered for secrets by the caller."""
    trusted = list(service.trusted_proxies)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        http=hardened_protocol(service),
        ws="none",
        timeout_keep_alive=service.keepalive_s,
        limit_concurrency=service.max_connections,
        proxy_headers=bool(trusted),
        forwarded_allow_ips=trusted or [],
        server_header=False,
    )
    return uvicorn.Server(config)


def banner(settings: Settings, *, host: str, port: int) -> str:
    """The line ``agentfleet serve`` starts with: where it listens and exactly what is on."""
    service = settings.service
    if service.token is None:
        surfaces = "run trigger off, console off (set AGENTFLEET_SERVICE__TOKEN, e.g. `openssl rand -hex 32`)"
    else:
        surfaces = (
            "run trigger on (POST /runs, GET /runs, bearer token), approvals on (/approvals, /events), "
            "console on (/console); "
            f"token checks throttled per address after {service.auth_free_failures} failures"
        )
    limits = (
        f"headers within {service.header_timeout_s:g} s, bodies within {service.body_timeout_s:g} s, "
        f"at most {service.max_connections} connections ({service.max_connections_per_client} per address)"
    )
    return f"agentfleet service on http://{host}:{port}: /health and /metrics open; {surfaces}; {limits}"
