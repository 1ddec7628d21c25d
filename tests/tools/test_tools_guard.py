"""The guard transport: pinning to the checked address, per-host pools, httpx and httpx2."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from tool_servers import Server, start_server

from agentfleet.config import FetchSettings
from agentfleet.errors import ForbiddenDestination, classify
from agentfleet.tools import guard as guard_module
from agentfleet.tools.guard import guard_transport, httpx2_guard, httpx_guard


class Recorder(httpx.BaseTransport):
    """Stands in for the real connection pool: records what would have been dialled."""

    def __init__(self, log: list[httpx.Request], closed: list[Recorder]) -> None:
        self._log = log
        self._closed = closed

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self._log.append(request)
        return httpx.Response(200, text="ok")

    def close(self) -> None:
        self._closed.append(self)


class Pools:
    def __init__(self) -> None:
        self.sent: list[httpx.Request] = []
        self.made: list[Recorder] = []
        self.closed: list[Recorder] = []

    def __call__(self) -> Recorder:
        pool = Recorder(self.sent, self.closed)
        self.made.append(pool)
        return pool


class Rebinding:
    """A resolver whose answers change between lookups, as a rebinding attacker's would."""

    def __init__(self, *answers: Sequence[str]) -> None:
        self._answers = list(answers)
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        return self._answers.pop(0) if len(self._answers) > 1 else self._answers[0]


def _client(**kwargs: Any) -> httpx.Client:
    return httpx.Client(transport=httpx_guard(**kwargs), trust_env=False, timeout=5)


def test_a_rebinding_answer_is_never_dialled() -> None:
    pools = Pools()
    resolver = Rebinding(["93.184.216.34"], ["127.0.0.1"])
    with _client(resolver=resolver, transport_factory=pools) as client:
        response = client.get("http://rebind.test/x?q=1")
        assert response.status_code == 200
        assert len(pools.sent) == 1
        sent = pools.sent[0]
        assert sent.url.host == "93.184.216.34"
        assert sent.url.raw_path == b"/x?q=1"
        assert sent.headers["host"] == "rebind.test"
        assert resolver.calls == ["rebind.test"]
        # The next lookup answers loopback: that request is refused, nothing is dialled.
        with pytest.raises(ForbiddenDestination, match=r"127\.0\.0\.1"):
            client.get("http://rebind.test/x")
    assert len(pools.sent) == 1


def test_https_keeps_the_name_for_tls() -> None:
    pools = Pools()
    resolver = Rebinding(["93.184.216.34"])
    with _client(resolver=resolver, transport_factory=pools) as client:
        client.get("https://Rebind.Test.:8443/p")
    sent = pools.sent[0]
    assert (sent.url.scheme, sent.url.host, sent.url.port) == ("https", "93.184.216.34", 8443)
    assert sent.extensions["sni_hostname"] == "rebind.test"
    assert sent.headers["host"] == "rebind.test.:8443"


def test_an_ip_literal_gets_no_server_name() -> None:
    pools = Pools()
    with _client(transport_factory=pools) as client:
        client.get("https://93.184.216.34/")
    assert "sni_hostname" not in pools.sent[0].extensions


def test_every_address_must_be_global() -> None:
    pools = Pools()
    resolver = Rebinding(["93.184.216.34", "10.1.2.3"])
    with (
        _client(resolver=resolver, transport_factory=pools) as client,
        pytest.raises(ForbiddenDestination, match=r"10\.1\.2\.3"),
    ):
        client.get("http://mixed.test/")
    assert pools.sent == []


def test_an_ipv4_mapped_answer_is_dialled_as_ipv4() -> None:
    pools = Pools()
    settings = FetchSettings(allow_private_hosts=["127.0.0.2"])
    resolver = Rebinding(["::ffff:127.0.0.2"])
    with _client(settings=settings, resolver=resolver, transport_factory=pools) as client:
        client.get("http://mapped.test/")
    assert pools.sent[0].url.host == "127.0.0.2"


def test_allowlist_by_name_opens_only_that_name() -> None:
    pools = Pools()
    settings = FetchSettings(allow_private_hosts=["intranet.test"])
    resolver = Rebinding(["10.9.9.9"])
    with _client(settings=settings, resolver=resolver, transport_factory=pools) as client:
        assert client.get("http://intranet.test/").status_code == 200
        with pytest.raises(ForbiddenDestination):
            client.get("http://other.test/")
        with pytest.raises(ForbiddenDestination):
            client.get("http://10.9.9.9/")
    assert [r.url.host for r in pools.sent] == ["10.9.9.9"]


def test_tls_connections_are_pooled_per_name() -> None:
    pools = Pools()
    resolver = Rebinding(["93.184.216.34"])
    with _client(resolver=resolver, transport_factory=pools) as client:
        client.get("https://a.test/")
        client.get("https://b.test/")
        client.get("https://a.test/again")
        client.get("http://a.test/")
        client.get("http://b.test/")
    # Two TLS names on one address never share a pool; plain http shares one.
    assert len(pools.made) == 3


def test_least_recently_used_pools_are_closed() -> None:
    pools = Pools()
    resolver = Rebinding(["93.184.216.34"])
    with _client(resolver=resolver, transport_factory=pools, max_pools=2) as client:
        for name in ("a", "b", "a", "c"):
            client.get(f"https://{name}.test/")
        assert pools.closed == [pools.made[1]]
    assert set(map(id, pools.closed)) == set(map(id, pools.made))


def test_a_closed_port_on_the_first_address_falls_back_to_the_next(
    serve: Callable[..., Server],
) -> None:
    server = serve("127.0.0.2")
    settings = FetchSettings(allow_private_hosts=["127.0.0.0/8"])
    # Port `server.port` on 127.0.0.3 is almost surely closed: a refused connection.
    resolver = Rebinding(["127.0.0.3", "127.0.0.2"])
    with _client(settings=settings, resolver=resolver) as client:
        response = client.get(f"http://two.test:{server.port}/")
    assert response.text == "canary"
    assert len(server.hits) == 1


def test_pinning_end_to_end_on_real_sockets(
    canaries: dict[str, Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The checked server is on 127.0.0.2; a would-be rebinding target listens on the same
    # port on 127.0.0.1. Only the checked one may see the request.
    try:
        checked, checked_httpd = start_server("127.0.0.2")
    except OSError as exc:
        pytest.skip(f"cannot bind 127.0.0.2: {exc}")
    try:
        decoy, decoy_httpd = start_server("127.0.0.1", checked.port)
    except OSError as exc:
        checked_httpd.shutdown()
        pytest.skip(f"port taken on 127.0.0.1: {exc}")
    looked_up: list[str] = []
    real_getaddrinfo = socket.getaddrinfo

    def spy(host: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(str(host))
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", spy)
    try:
        settings = FetchSettings(allow_private_hosts=["127.0.0.2"])
        resolver = Rebinding(["127.0.0.2"], ["127.0.0.1"])
        with _client(settings=settings, resolver=resolver) as client:
            response = client.get(f"http://rebind.test:{checked.port}/pinned")
            with pytest.raises(ForbiddenDestination):
                client.get(f"http://rebind.test:{checked.port}/rebound")
        assert response.text == "canary"
        assert [hit.path for hit in checked.hits] == ["/pinned"]
        assert checked.hits[0].headers["Host"] == f"rebind.test:{checked.port}"
        assert decoy.hits == []
        assert "rebind.test" not in looked_up
    finally:
        for httpd in (checked_httpd, decoy_httpd):
            httpd.shutdown()
            httpd.server_close()


def test_httpx2_guard_refuses_and_allows(canary: Server) -> None:
    with (
        httpx2.Client(transport=httpx2_guard(), trust_env=False) as client,
        pytest.raises(ForbiddenDestination),
    ):
        client.get(canary.url("/v2"))
    settings = FetchSettings(allow_private_hosts=["127.0.0.1"])
    transport = guard_transport(httpx2, settings=settings)
    assert isinstance(transport, httpx2.BaseTransport)
    with httpx2.Client(transport=transport, trust_env=False) as client:
        response = client.get(canary.url("/v2"))
    assert response.text == "canary"
    assert [hit.path for hit in canary.hits] == ["/v2"]


def test_the_anthropic_sdk_is_refused_through_the_guard(canary: Server) -> None:
    http_client = httpx2.Client(transport=httpx2_guard(), trust_env=False)
    sdk = anthropic.Anthropic(api_key="test", base_url=canary.url(), http_client=http_client, max_retries=0)
    with pytest.raises(anthropic.APIConnectionError) as caught:
        sdk.messages.create(
            model="claude-haiku-4-5",
            max_tokens=8,
            messages=[{"role": "user", "content": "hi"}],
        )
    assert isinstance(classify(caught.value), ForbiddenDestination)
    assert canary.hits == []


def _make_cert(tmp: Path, name: str) -> tuple[Path, Path]:
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName=DNS:{name}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.mark.slow
def test_tls_verifies_the_original_name_at_the_pinned_address(tmp_path: Path) -> None:
    cert, key = _make_cert(tmp_path, "pinned.test")
    server_names: list[str | None] = []
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    server_ctx.sni_callback = lambda sock, name, ctx: server_names.append(name)  # type: ignore[assignment,misc,func-returns-value]
    info, httpd = start_server("127.0.0.1")
    httpd.socket = server_ctx.wrap_socket(httpd.socket, server_side=True)
    try:
        client_ctx = ssl.create_default_context(cafile=str(cert))
        settings = FetchSettings(allow_private_hosts=["127.0.0.1"])
        resolver = Rebinding(["127.0.0.1"])
        transport = httpx_guard(
            settings=settings,
            resolver=resolver,
            transport_factory=lambda: httpx.HTTPTransport(verify=client_ctx),
        )
        with httpx.Client(transport=transport, trust_env=False, timeout=10) as client:
            response = client.get(f"https://pinned.test:{info.port}/tls")
            assert response.text == "canary"
            assert server_names == ["pinned.test"]
            # The same address under a name the certificate does not cover must fail.
            with pytest.raises(httpx.ConnectError, match="certificate"):
                client.get(f"https://other.test:{info.port}/tls")
        assert [hit.path for hit in info.hits] == ["/tls"]
    finally:
        threading.Thread(target=httpd.shutdown, daemon=True).start()
        httpd.server_close()


def test_one_ssl_context_per_process_made_before_any_request(
    canary: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Parsing the CA bundle is the costly part of a transport; the fleet transport calls
    # the guard only after the limiter's grant, so it must not happen per request or per pool.
    # Counted where the bundle is read, whichever way the httpx release builds its context.
    parsed: list[ssl.SSLContext] = []
    real = ssl.SSLContext.load_verify_locations

    def counting(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        parsed.append(context)
        real(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    guard_module._ssl_context.cache_clear()
    try:
        settings = FetchSettings(allow_private_hosts=["127.0.0.1"])
        guards = [httpx_guard(settings=settings) for _ in range(3)]
        assert len(parsed) == 1, "made with the first guard"
        for guard in guards:
            with httpx.Client(transport=guard, trust_env=False) as client:
                assert client.get(canary.url("/shared")).text == "canary"
        assert len(parsed) == 1
    finally:
        guard_module._ssl_context.cache_clear()
