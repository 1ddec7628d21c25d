"""Resolving a host name for the SSRF guard: the system resolver, run with a time limit.

``getaddrinfo`` cannot be interrupted, so a lookup with a time limit runs on a small thread
pool (one per process) and is abandoned when the limit passes. A resolver is injected
(``Resolver``), so the guard's decisions (``agentfleet.tools.ssrf``) stay testable.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from agentfleet.errors import ConnectionFailed, ForbiddenDestination, TaskTimeout
from agentfleet.tools.host_spelling import Address

__all__ = ["Resolver", "resolve_addresses", "system_resolver"]

Resolver = Callable[[str, int], Sequence[str]]
"""``resolver(host, port)`` -> the host's addresses as strings, in connection order."""


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


def resolve_addresses(host: str, port: int, resolver: Resolver, timeout_s: float | None) -> list[Address]:
    """The addresses ``resolver`` gives for ``host``, waiting at most ``timeout_s`` seconds (no
    limit when None); ``ForbiddenDestination`` for an answer that is not an address."""
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
