"""A real ``agentfleet serve`` sheds slow and abusive clients while ``/health`` keeps answering.

The attacks that held connections before: clients trickling a request's headers a byte at a
time (authenticated or not), a body trickled after its headers, one address opening
connection after connection, and 300 token guesses as fast as the service answered. The
oracle is the socket: closed by the server, or still open.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from ops_support import BIN, ServiceProcess, http_status, wait_for

from agentfleet.embedded_redis import free_port

pytestmark = pytest.mark.slow

TOKEN = "srv-" + "0123456789abcdef" * 2
HEADER_TIMEOUT_S = 2
BODY_TIMEOUT_S = 3
PER_CLIENT = 12


@dataclass(frozen=True)
class Served:
    process: ServiceProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def served(redis_url: str) -> Iterator[Served]:
    port = free_port()
    env = {
        **os.environ,
        "AGENTFLEET_BROKER_URL": redis_url,
        "AGENTFLEET_KEY_PREFIX": f"srv{uuid.uuid4().hex[:8]}",
        "AGENTFLEET_SERVICE__TOKEN": TOKEN,
        "AGENTFLEET_SERVICE__HEADER_TIMEOUT_S": str(HEADER_TIMEOUT_S),
        "AGENTFLEET_SERVICE__BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "AGENTFLEET_SERVICE__MAX_CONNECTIONS_PER_CLIENT": str(PER_CLIENT),
    }
    log_dir = Path(tempfile.mkdtemp(prefix="agentfleet-sec-serve-"))
    proc = ServiceProcess("serve", [str(BIN / "agentfleet"), "serve", "--port", str(port)], env, log_dir)
    try:
        wait_for(
            lambda: http_status(f"http://127.0.0.1:{port}/health") == 200,
            timeout_s=60,
            what="the service",
            processes=[proc],
        )
        yield Served(proc, port)
    finally:
        proc.stop()
        shutil.rmtree(log_dir, ignore_errors=True)


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    sock.settimeout(0.2)
    return sock


def _closed(sock: socket.socket) -> bool:
    """True once the server closed the connection (what it sent before that is read and dropped)."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except TimeoutError:
        return False
    except OSError:
        return True


class Trickler(threading.Thread):
    """Sends ``head`` and then one byte of ``tail`` every ``every_s`` seconds, until closed."""

    def __init__(self, sock: socket.socket, head: bytes, tail: bytes, every_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.sock, self.head, self.tail, self.every_s = sock, head, tail, every_s
        self.stop = threading.Event()

    def run(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(self.head)
            for byte in self.tail:
                if self.stop.wait(self.every_s):
                    return
                self.sock.sendall(bytes([byte]))


def _health_answers(served: Served, source: str = "127.0.0.2") -> bool:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=5) as client:
        return client.get(f"{served.url}/health").status_code == 200


def test_the_banner_says_what_is_on(served: Served) -> None:
    banner = served.process.log()
    assert "run trigger on" in banner and "console on" in banner
    assert f"headers within {HEADER_TIMEOUT_S} s" in banner


def test_connections_trickling_their_headers_are_closed_while_health_answers(served: Served) -> None:
    heads = [b"GET /health HTTP/1.1\r\nHost: x\r\n", b"POST /runs HTTP/1.1\r\nHost: x\r\n"]
    slow = [_connect(served.port) for _ in range(11)]
    tricklers = [
        Trickler(
            sock,
            heads[n % 2],
            b"X-Slow: " + b"a" * 200 + (f"\r\nAuthorization: Bearer {TOKEN}".encode() if n % 3 == 0 else b""),
        )
        for n, sock in enumerate(slow)
    ]
    for trickler in tricklers:
        trickler.start()
    try:
        assert _health_answers(served)
        started = time.monotonic()
        wait_for(
            lambda: all(_closed(s) for s in slow),
            timeout_s=HEADER_TIMEOUT_S + 8,
            what="every trickling connection closed",
        )
        assert time.monotonic() - started < HEADER_TIMEOUT_S + 8
        assert _health_answers(served)
    finally:
        for trickler, sock in zip(tricklers, slow, strict=True):
            trickler.stop.set()
            sock.close()


def test_a_body_trickled_after_its_headers_is_cut_off(served: Served) -> None:
    sock = _connect(served.port)
    head = (
        f"POST /runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n"
    ).encode()
    trickler = Trickler(sock, head, b'{"fanout": "' + b"a" * 3000, every_s=0.3)
    trickler.start()
    try:
        wait_for(
            lambda: _closed(sock), timeout_s=BODY_TIMEOUT_S + 8, what="the slow body's connection closed"
        )
    finally:
        trickler.stop.set()
        sock.close()


def test_one_address_cannot_hold_every_connection(served: Served) -> None:
    idle = [_connect(served.port) for _ in range(PER_CLIENT * 3)]
    try:
        time.sleep(0.5)
        still_open = [s for s in idle if not _closed(s)]
        assert len(still_open) <= PER_CLIENT, len(still_open)
        assert _health_answers(served, source="127.0.0.3"), "another address is served"
    finally:
        for sock in idle:
            sock.close()


def test_three_hundred_guesses_meet_429_after_a_few(served: Served) -> None:
    codes: dict[int, int] = {}
    transport = httpx.HTTPTransport(local_address="127.0.0.4")
    with httpx.Client(transport=transport, timeout=5) as client:
        for n in range(300):
            status = client.get(
                f"{served.url}/runs", headers={"Authorization": f"Bearer guess-{n:040d}"}
            ).status_code
            codes[status] = codes.get(status, 0) + 1
    assert codes.get(401, 0) <= 10 and codes.get(429, 0) >= 290, codes
    assert _health_answers(served, source="127.0.0.5")
    other = httpx.HTTPTransport(local_address="127.0.0.6")
    with httpx.Client(transport=other, timeout=5) as operator:
        assert (
            operator.get(f"{served.url}/runs", headers={"Authorization": f"Bearer {TOKEN}"}).status_code
            == 200
        )
