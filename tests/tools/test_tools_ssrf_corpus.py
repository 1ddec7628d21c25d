"""The SSRF corpus: every vector is refused and not one request reaches the canary servers."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from urllib.parse import quote

import httpx
import pytest
from tool_servers import Server, open_redirect

from agentfleet.config import FetchSettings
from agentfleet.errors import ForbiddenDestination
from agentfleet.tools.fetch import http_fetch
from agentfleet.tools.guard import httpx_guard
from agentfleet.tools.ssrf import system_resolver

FAKE_DNS: dict[str, list[str]] = {
    "private.test": ["10.0.0.5"],
    "loop.test": ["127.0.0.1"],
    "metadata.google.internal": ["169.254.169.254"],
    "mixed.test": ["93.184.216.34", "127.0.0.1"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "v6loop.test": ["::1"],
    "cgnat.test": ["100.64.1.1"],
    "linklocal6.test": ["fe80::1"],
    "ula.test": ["fd00::1"],
    "zero.test": ["0.0.0.0"],
}


def fake_resolver(host: str, port: int) -> Sequence[str]:
    if host in FAKE_DNS:
        return FAKE_DNS[host]
    return system_resolver(host, port)


# {p}: the IPv4 canary's port; {p6}: the IPv6 canary's port (the IPv4 one when there is none).
VECTORS: list[str] = [
    # loopback, every IPv4 spelling
    "http://127.0.0.1:{p}/",
    "http://127.1:{p}/",
    "http://127.0.1:{p}/",
    "http://2130706433:{p}/",
    "http://0x7f000001:{p}/",
    "http://0x7f.0.0.1:{p}/",
    "http://0x7F.0x00.0x00.0x01:{p}/",
    "http://0177.0.0.1:{p}/",
    "http://0177.0000.0000.0001:{p}/",
    "http://017700000001:{p}/",
    "http://0x7f.1:{p}/",
    "http://127.000.000.001:{p}/",
    "http://0x7f.0.1:{p}/",
    "http://127.0.0.1.:{p}/",
    "http://%31%32%37.0.0.1:{p}/",
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11:{p}/",
    "http://127\u30020\u30020\u30021:{p}/",
    "HTTP://127.0.0.1:{p}/",
    "http://127.255.255.254:{p}/",
    # unspecified
    "http://0.0.0.0:{p}/",
    "http://0:{p}/",
    # userinfo and fragment tricks
    "http://evil@127.0.0.1:{p}/",
    "http://good.example@127.0.0.1:{p}/",
    "http://good.example:pw@127.0.0.1:{p}/",
    "http://127.0.0.1:{p}#@good.example/",
    "http://127.0.0.1:{p}?@good.example/",
    # IPv6 forms
    "http://[::1]:{p6}/",
    "http://[0:0:0:0:0:0:0:1]:{p6}/",
    "http://[::]:{p6}/",
    "http://[::ffff:127.0.0.1]:{p}/",
    "http://[::ffff:7f00:1]:{p}/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/",
    "http://[::127.0.0.1]:{p}/",
    "http://[64:ff9b::127.0.0.1]:{p}/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:7f00:1::]:{p}/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[fe80::1%25lo]:{p6}/",
    "http://[fe80::1]:{p6}/",
    "http://[fc00::1]/",
    "http://[fd00::1]/",
    "http://[ff02::1]/",
    "http://[2001:db8::1]/",
    "http://[::ffff:a9fe:a9fe]/",
    # cloud metadata, every spelling
    "http://169.254.169.254/latest/meta-data/",
    "http://2852039166/latest/meta-data/",
    "http://0xa9fea9fe/",
    "http://0xa9.0xfe.0xa9.0xfe/",
    "http://0251.0376.0251.0376/",
    "http://169.254.43518/",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    # private, shared and special ranges
    "http://10.0.0.1/",
    "http://10.255.255.255/",
    "http://172.16.0.1/",
    "http://172.31.255.254/",
    "http://192.168.0.1/",
    "http://100.64.0.1/",
    "http://100.127.255.254/",
    "http://198.18.0.1/",
    "http://192.0.2.1/",
    "http://198.51.100.7/",
    "http://203.0.113.9/",
    "http://192.0.0.1/",
    "http://224.0.0.1/",
    "http://239.255.255.250/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    # names
    "http://localhost:{p}/",
    "http://LOCALHOST.:{p}/",
    "http://api.localhost:{p}/",
    "http://loop.test:{p}/",
    "http://private.test:{p}/",
    "http://mixed.test:{p}/",
    "http://mapped.test:{p}/",
    "http://v6loop.test:{p6}/",
    "http://cgnat.test/",
    "http://linklocal6.test/",
    "http://ula.test/",
    "http://zero.test:{p}/",
    "http://example.123:{p}/",
    # schemes other than http and https
    "file:///etc/passwd",
    "file://127.0.0.1/etc/passwd",
    "gopher://127.0.0.1:{p}/_GET%20/%20HTTP/1.0%0d%0a",
    "ftp://127.0.0.1:{p}/",
    "dict://127.0.0.1:{p}/info",
    "ws://127.0.0.1:{p}/",
    "data:text/plain,hello",
    "//127.0.0.1:{p}/",
]


def _format(vector: str, canaries: dict[str, Server]) -> str:
    v4 = canaries["v4"].port
    v6 = canaries["v6"].port if "v6" in canaries else v4
    return vector.format(p=v4, p6=v6)


def _hits(canaries: dict[str, Server]) -> int:
    return sum(len(server.hits) for server in canaries.values())


@pytest.fixture
def guarded() -> Iterator[httpx.Client]:
    transport = httpx_guard(settings=FetchSettings(), resolver=fake_resolver)
    with httpx.Client(transport=transport, trust_env=False, timeout=5) as client:
        yield client


def test_the_corpus_is_large_enough() -> None:
    assert len(VECTORS) >= 40
    assert len(set(VECTORS)) == len(VECTORS)


@pytest.mark.parametrize("vector", VECTORS)
def test_http_fetch_refuses(vector: str, canaries: dict[str, Server], guarded: httpx.Client) -> None:
    url = _format(vector, canaries)
    with pytest.raises(ForbiddenDestination) as caught:
        http_fetch(guarded, url, settings=FetchSettings(timeout_s=5))
    assert caught.value.message
    assert _hits(canaries) == 0


@pytest.mark.parametrize("vector", VECTORS)
def test_the_guard_alone_refuses(vector: str, canaries: dict[str, Server], guarded: httpx.Client) -> None:
    # Without http_fetch's early check, the transport layer must refuse on its own.
    url = _format(vector, canaries)
    try:
        request = guarded.build_request("GET", url)
    except httpx.InvalidURL:
        assert _hits(canaries) == 0
        return
    with pytest.raises(ForbiddenDestination):
        guarded.send(request)
    assert _hits(canaries) == 0


def test_the_canary_counts_what_is_allowed(
    canaries: dict[str, Server],
) -> None:
    # The zero counts above mean something only if an allowed request is counted.
    settings = FetchSettings(allow_private_hosts=["127.0.0.1"])
    with httpx.Client(transport=httpx_guard(settings=settings), trust_env=False) as client:
        result = http_fetch(client, canaries["v4"].url("/hello"), settings=settings)
    assert result.status == 200
    assert result.text == "canary"
    assert [hit.path for hit in canaries["v4"].hits] == ["/hello"]


REDIRECT_TARGETS = {
    "/to-canary": "http://127.0.0.1:{p}/",
    "/to-decimal": "http://2130706433:{p}/",
    "/to-short": "http://127.1:{p}/",
    "/to-mapped": "http://[::ffff:127.0.0.1]:{p}/",
    "/to-localhost": "http://localhost:{p}/",
    "/to-name": "http://loop.test:{p}/",
    "/to-metadata": "http://169.254.169.254/latest/meta-data/",
    "/to-file": "file:///etc/passwd",
    "/to-gopher": "gopher://127.0.0.1:{p}/_x",
    "/two-hops": "/to-canary",
}


@pytest.fixture
def redirector(
    serve: Callable[[str], Server], canaries: dict[str, Server], reply: Callable[..., None]
) -> Server:
    server = serve("127.0.0.2")
    for path, location in REDIRECT_TARGETS.items():
        target = _format(location, canaries)
        server.routes[path] = lambda handler, target=target: reply(handler, 302, headers={"Location": target})
    return server


@pytest.mark.parametrize("path", sorted(REDIRECT_TARGETS))
def test_redirects_into_private_space_are_refused(
    path: str, redirector: Server, canaries: dict[str, Server]
) -> None:
    settings = FetchSettings(allow_private_hosts=["127.0.0.2"], timeout_s=5)
    transport = httpx_guard(settings=settings, resolver=fake_resolver)
    with httpx.Client(transport=transport, trust_env=False) as client:
        with pytest.raises(ForbiddenDestination):
            http_fetch(client, redirector.url(path), settings=settings)
        # The same through the client's own redirect following: the guard sees every hop.
        with pytest.raises(ForbiddenDestination):
            client.get(redirector.url(path), follow_redirects=True)
    assert len(redirector.hits) >= 2
    assert _hits(canaries) == 0


@pytest.mark.parametrize("vector", VECTORS)
def test_an_open_redirect_on_an_allowed_host_reaches_no_vector(
    vector: str, serve: Callable[[str], Server], canaries: dict[str, Server]
) -> None:
    # The allowed host (opened by allow_private_hosts) redirects wherever `next` says.
    allowed = serve("127.0.0.2")
    allowed.routes["/open"] = open_redirect
    url = allowed.url("/open?next=" + quote(_format(vector, canaries), safe=""))
    settings = FetchSettings(allow_private_hosts=["127.0.0.2"], timeout_s=5)
    transport = httpx_guard(settings=settings, resolver=fake_resolver)
    with httpx.Client(transport=transport, trust_env=False) as client:
        # httpx itself refuses a Location it cannot parse; either way nothing is sent.
        with pytest.raises((ForbiddenDestination, httpx.InvalidURL, httpx.RemoteProtocolError)):
            client.get(url, follow_redirects=True)
        with pytest.raises(ForbiddenDestination):
            http_fetch(client, url, settings=settings)
    assert _hits(canaries) == 0
    assert len(allowed.hits) == 2
