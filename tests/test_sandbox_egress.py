"""The egress proxy against local HTTP and HTTPS destinations, with httpx clients that reach it
through the bridge's forwarding to its Unix socket. The oracle is what the destination saw."""

from __future__ import annotations

import base64
import functools
import socket
import ssl
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from egress_support import SECRET, Echo, echo_server, loopback_forwarder, test_tls

from agentfleet.config import Settings
from agentfleet.errors import ConfigError, Deferred
from agentfleet.redaction import base64_cores
from agentfleet.sandbox import SandboxSpec
from agentfleet.sandbox.egress import EgressProxy, EgressWiring
from agentfleet.tools.audit import AuditLog
from agentfleet.tools.pools import TransportPools
from agentfleet.tools.transport import FleetHooks


@dataclass
class Rig:
    http: Echo
    https: Echo
    other: Echo
    proxy: EgressProxy
    client: httpx.Client
    socket_path: Path


def _settings(**egress: Any) -> Settings:
    return Settings(
        fetch={"allow_private_hosts": ["127.0.0.1"]},
        credentials={
            "tok": {"env": "EGRESS_TEST_TOKEN", "domains": ["127.0.0.1"]},
            "narrow": {"env": "EGRESS_TEST_NARROW", "domains": ["api.vendor.example"]},
            "unnamed": {"env": "EGRESS_TEST_UNNAMED", "domains": ["127.0.0.1"]},
        },
        egress=egress,
    )


@pytest.fixture
def destinations(tmp_path: Path) -> Iterator[tuple[Echo, Echo, Echo, Path]]:
    context, ca = test_tls(tmp_path)
    with echo_server() as plain, echo_server(context) as secure, echo_server() as other:
        yield plain, secure, other, ca


def _rig(
    tmp_path: Path,
    destinations: tuple[Echo, Echo, Echo, Path],
    wiring: EgressWiring | None = None,
    **egress: Any,
) -> Iterator[Rig]:
    plain, secure, other, destination_ca = destinations
    upstream = ssl.create_default_context(cafile=str(destination_ca))
    wiring = wiring or EgressWiring()
    wiring.pools = TransportPools(functools.partial(httpx.HTTPTransport, verify=upstream))
    spec = SandboxSpec(
        network=[f"127.0.0.1:{plain.port}", f"127.0.0.1:{secure.port}"], credentials=["tok", "narrow"]
    )
    path = tmp_path / "egress.sock"
    with (
        EgressProxy(
            _settings(**egress), spec, path, run_id="run-1", task_name="review", wiring=wiring
        ) as proxy,
        loopback_forwarder(path) as port,
    ):
        trust = ssl.create_default_context(cafile=str(proxy.ca_cert_path))
        with httpx.Client(proxy=f"http://127.0.0.1:{port}", verify=trust, trust_env=False) as client:
            yield Rig(plain, secure, other, proxy, client, path)
    wiring.pools.close()


@pytest.fixture
def rig(
    tmp_path: Path, destinations: tuple[Echo, Echo, Echo, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Rig]:
    monkeypatch.setenv("EGRESS_TEST_TOKEN", SECRET)
    monkeypatch.setenv("EGRESS_TEST_NARROW", NARROW)
    monkeypatch.setenv("EGRESS_TEST_UNNAMED", "unnamed-value-0b1f7d")
    yield from _rig(tmp_path, destinations)


NARROW = "narrow-value-5e2d8a91c4"


def _spellings() -> list[bytes]:
    raw = SECRET.encode()
    return [raw, base64.b64encode(raw), base64.b64encode(b"user:" + raw)[8:-4]]


def test_a_declared_http_destination_is_reached(rig: Rig) -> None:
    response = rig.client.get(f"http://127.0.0.1:{rig.http.port}/echo?q=1")
    assert response.status_code == 200
    assert response.json()["path"] == "/echo?q=1"
    assert [path for path, _ in rig.http.seen] == ["/echo?q=1"]


def test_a_declared_https_destination_is_reached_through_the_workers_ca(rig: Rig) -> None:
    response = rig.client.get(f"https://127.0.0.1:{rig.https.port}/echo")
    assert response.status_code == 200
    assert response.json()["path"] == "/echo"
    assert rig.https.seen == [("/echo", "")]


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_an_undeclared_destination_is_refused_with_the_setting_to_change(
    rig: Rig, scheme: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"{scheme}://127.0.0.1:{rig.other.port}/echo"
    if scheme == "https":
        with pytest.raises(
            httpx.ProxyError, match=f"403.*127.0.0.1:{rig.other.port} is not in the task's sandbox"
        ):
            rig.client.get(url)
    else:
        response = rig.client.get(url)
        assert response.status_code == 403
        assert response.headers["x-agentfleet-egress"] == "refused"
        assert f"127.0.0.1:{rig.other.port}" in response.text
        assert "@fleet_task(sandbox=...)" in response.text and "'review'" in response.text
    assert rig.other.seen == []
    (record,) = [r for r in caplog.records if r.name == "agentfleet.egress"]
    assert f"127.0.0.1:{rig.other.port} for task review (run run-1)" in record.getMessage()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_named_credential_is_filled_in_on_the_way_out_and_never_comes_back(rig: Rig, scheme: str) -> None:
    server = rig.http if scheme == "http" else rig.https
    response = rig.client.get(
        f"{scheme}://127.0.0.1:{server.port}/echo", headers={"Authorization": "Bearer $CRED{tok}"}
    )
    assert response.status_code == 200
    assert server.seen == [("/echo", f"Bearer {SECRET}")]
    assert response.json()["headers"]["Authorization"] == "Bearer $CRED{tok}"
    assert response.headers["x-seen-authorization"] == "Bearer $CRED{tok}"
    assert all(form not in response.content for form in _spellings())


@pytest.mark.parametrize("path", ["/gzip", "/split"])
def test_a_reflected_value_is_replaced_in_encoded_and_split_bodies(rig: Rig, path: str) -> None:
    response = rig.client.get(
        f"https://127.0.0.1:{rig.https.port}{path}", headers={"Authorization": "Bearer $CRED{tok}"}
    )
    assert rig.https.seen == [(path, f"Bearer {SECRET}")]
    assert b"Bearer $CRED{tok}" in response.content
    assert SECRET.encode() not in response.content


def test_a_value_reflected_in_base64_does_not_come_back(rig: Rig) -> None:
    url = f"http://127.0.0.1:{rig.http.port}/echo"
    response = rig.client.get(url, headers={"Authorization": "Bearer $CRED{tok}"})
    assert rig.http.seen == [("/echo", f"Bearer {SECRET}")]
    assert base64.b64encode(f"Bearer {SECRET}".encode()) not in response.content
    assert not any(core in response.content for core in base64_cores(SECRET.encode()))


def test_a_credential_the_sandbox_does_not_name_is_refused_unsent(rig: Rig) -> None:
    response = rig.client.get(
        f"http://127.0.0.1:{rig.http.port}/echo", headers={"Authorization": "$CRED{unnamed}"}
    )
    assert response.status_code == 403
    assert "'unnamed'" in response.text and "tok, narrow" in response.text
    assert rig.http.seen == []


def test_a_credential_outside_its_domains_is_refused_unsent(rig: Rig) -> None:
    response = rig.client.get(
        f"http://127.0.0.1:{rig.http.port}/echo", headers={"Authorization": "$CRED{narrow}"}
    )
    assert response.status_code == 403
    assert "api.vendor.example" in response.text
    assert NARROW not in response.text
    assert rig.http.seen == []


def test_one_connection_carries_several_requests(rig: Rig) -> None:
    for _ in range(3):
        assert rig.client.get(f"http://127.0.0.1:{rig.http.port}/echo").status_code == 200
    assert rig.proxy.open_connections == 1


def test_the_proxy_sends_what_the_program_sent_and_keeps_no_cookies(rig: Rig) -> None:
    url = f"http://127.0.0.1:{rig.http.port}/echo"
    assert rig.client.get(url).headers["set-cookie"] == "session=from-the-destination"
    rig.client.cookies.clear()
    seen = rig.client.get(url, headers={"X-Mine": "1"}).json()["headers"]
    assert "Cookie" not in seen and seen["X-Mine"] == "1"


def test_a_client_waiting_for_100_continue_gets_it_and_its_body_through(rig: Rig) -> None:
    conn = socket.socket(socket.AF_UNIX)
    conn.settimeout(10)
    conn.connect(str(rig.socket_path))
    head = f"POST http://127.0.0.1:{rig.http.port}/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
    conn.sendall((head + "Expect: 100-continue\r\nConnection: close\r\n\r\n").encode())
    assert conn.recv(100).startswith(b"HTTP/1.1 100")
    conn.sendall(b"hello")
    received = b""
    while chunk := conn.recv(65536):
        received += chunk
    conn.close()
    assert received.startswith(b"HTTP/1.1 200") and b'"length": 5' in received


def _raw(path: Path, data: bytes, timeout_s: float = 10.0) -> bytes:
    conn = socket.socket(socket.AF_UNIX)
    conn.settimeout(timeout_s)
    conn.connect(str(path))
    if data:
        conn.sendall(data)
    received = b""
    while chunk := conn.recv(65536):
        received += chunk
    conn.close()
    return received


def test_a_request_body_over_the_cap_is_answered_413_and_not_sent(
    tmp_path: Path, destinations: tuple[Echo, Echo, Echo, Path]
) -> None:
    for rig in _rig(tmp_path, destinations, max_request_bytes=1000):
        small = rig.client.post(f"http://127.0.0.1:{rig.http.port}/echo", content=b"a" * 1000)
        assert small.json()["length"] == 1000
        big = rig.client.post(f"http://127.0.0.1:{rig.http.port}/echo", content=b"a" * 1001)
        assert big.status_code == 413
        assert "egress.max_request_bytes" in big.text
        assert len(rig.http.seen) == 1


def test_a_response_over_the_cap_is_cut(tmp_path: Path, destinations: tuple[Echo, Echo, Echo, Path]) -> None:
    for rig in _rig(tmp_path, destinations, max_response_bytes=100_000):
        assert len(rig.client.get(f"http://127.0.0.1:{rig.http.port}/bytes?n=100000").content) == 100_000
        with pytest.raises(httpx.RemoteProtocolError):
            rig.client.get(f"http://127.0.0.1:{rig.http.port}/bytes?n=100001")


def test_connections_over_the_cap_are_turned_away_and_idle_ones_closed(
    tmp_path: Path, destinations: tuple[Echo, Echo, Echo, Path]
) -> None:
    for rig in _rig(tmp_path, destinations, max_connections=3, idle_timeout_s=1.0):
        held = []
        for _ in range(3):
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(str(rig.socket_path))
            held.append(conn)
        deadline = time.monotonic() + 10
        while rig.proxy.open_connections < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _raw(rig.socket_path, b"").startswith(b"HTTP/1.1 503")
        for conn in held:
            conn.settimeout(10)
            assert conn.recv(10) == b""  # closed by the proxy once idle
            conn.close()
        reply = _raw(rig.socket_path, f"GET http://127.0.0.1:{rig.http.port}/echo HTTP/1.0\r\n\r\n".encode())
        assert reply.startswith(b"HTTP/1.1 200")


def test_a_request_head_over_the_cap_is_answered_431(rig: Rig) -> None:
    head = f"GET http://127.0.0.1:{rig.http.port}/echo HTTP/1.1\r\nHost: x\r\nX-Big: {'a' * 70_000}\r\n\r\n"
    assert _raw(rig.socket_path, head.encode()).startswith(b"HTTP/1.1 431")
    assert rig.http.seen == []


def test_a_request_that_is_not_for_a_proxy_is_answered_400(rig: Rig) -> None:
    reply = _raw(rig.socket_path, b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 400") and b"absolute-form" in reply
    assert _raw(rig.socket_path, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400")


def test_credential_uses_are_audited_and_limits_asked_per_destination(
    tmp_path: Path,
    destinations: tuple[Echo, Echo, Echo, Path],
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    key_prefix: str,
) -> None:
    monkeypatch.setenv("EGRESS_TEST_TOKEN", SECRET)
    asked: list[str] = []

    class Limiter:
        def acquire(self, downstream: str, **_: Any) -> Any:
            asked.append(downstream)
            if len(asked) > 1:
                raise Deferred(2.5, downstream=downstream)
            return self

        def pause(self, downstream: str, seconds: float) -> None:
            return None

        def release(self) -> None:
            return None

        def reconcile(self, **_: Any) -> None:
            return None

    audit = AuditLog(redis.Redis.from_url(redis_url), key_prefix)
    wiring = EgressWiring(hooks=FleetHooks(limiter=Limiter()), audit=audit, task_id="task-7")
    for rig in _rig(tmp_path, destinations, wiring):
        url = f"http://127.0.0.1:{rig.http.port}/echo"
        assert rig.client.get(url, headers={"Authorization": "$CRED{tok}"}).status_code == 200
        deferred = rig.client.get(url)
        assert deferred.status_code == 429 and deferred.headers["retry-after"] == "3"
    assert asked == ["127.0.0.1", "127.0.0.1"]
    assert len(rig.http.seen) == 1
    (entry,) = audit.read()
    assert (entry.task_id, entry.credential, entry.domain) == ("task-7", "tok", "127.0.0.1")


def test_the_ca_key_is_never_written_and_stop_is_idempotent(rig: Rig) -> None:
    ca_dir = rig.proxy.ca_cert_path.parent
    assert [p.name for p in ca_dir.iterdir()] == ["egress-ca.pem"]
    assert b"PRIVATE KEY" not in rig.proxy.ca_cert_path.read_bytes()
    assert stat.S_IMODE(rig.socket_path.stat().st_mode) == 0o600
    rig.proxy.stop()
    rig.proxy.stop()
    assert not rig.socket_path.exists()


def test_stop_closes_open_tunnels_at_once(rig: Rig) -> None:
    assert rig.client.get(f"https://127.0.0.1:{rig.https.port}/echo").status_code == 200
    assert rig.proxy.open_connections == 1  # the tunnel, kept alive by the client
    started = time.monotonic()
    rig.proxy.stop()
    assert time.monotonic() - started < 2.0
    assert rig.proxy.open_connections == 0


def test_a_spec_naming_an_unconfigured_credential_fails_at_once(tmp_path: Path) -> None:
    spec = SandboxSpec(network=["api.vendor.example"], credentials=["missing"])
    with pytest.raises(ConfigError, match="'missing'"):
        EgressProxy(_settings(), spec, tmp_path / "s.sock", run_id="r", task_name="t")
