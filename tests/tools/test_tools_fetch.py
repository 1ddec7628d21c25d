"""http_fetch: allowed fetches, the size cap, redirects, timeouts and input checks."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import httpx
import pytest
from tool_servers import Server

from agentfleet.config import FetchSettings
from agentfleet.errors import BadRequest, ConnectionFailed, InvalidInput, TaskTimeout
from agentfleet.tools.fetch import HTTP_FETCH_TOOL, http_fetch
from agentfleet.tools.guard import httpx_guard

LOCAL = FetchSettings(allow_private_hosts=["127.0.0.1", "127.0.0.2"], timeout_s=5)


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(transport=httpx_guard(settings=LOCAL), trust_env=False) as c:
        yield c


def _settings(**changes: object) -> FetchSettings:
    return LOCAL.model_copy(update=changes)


def _body_route(body: bytes, *, length: bool = True, charset: str = "utf-8") -> Callable[..., None]:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", f"text/plain; charset={charset}")
        if length:
            handler.send_header("Content-Length", str(len(body)))
        else:
            handler.send_header("Connection", "close")
            handler.close_connection = True
        handler.end_headers()
        handler.wfile.write(body)

    return route


def test_an_allowlisted_local_server_is_fetched(canary: Server, client: httpx.Client) -> None:
    result = http_fetch(client, canary.url("/page?x=1"), settings=LOCAL)
    assert result.status == 200
    assert result.text == "canary"
    assert result.url == canary.url("/page?x=1")
    assert result.headers["content-type"] == "text/plain"
    assert (result.truncated, result.bytes_read, result.redirects) == (False, 6, [])
    assert canary.hits[0].headers["Accept-Encoding"] == "identity"
    json.dumps(result.model_dump())


def test_head_and_declared_charset(canary: Server, client: httpx.Client) -> None:
    canary.routes["/latin"] = _body_route("café".encode("latin-1"), charset="iso-8859-1")
    assert http_fetch(client, canary.url("/latin"), settings=LOCAL).text == "café"
    head = http_fetch(client, canary.url("/"), settings=LOCAL, method="head")
    assert (head.status, head.text, canary.hits[-1].method) == (200, "", "HEAD")


@pytest.mark.parametrize("length", [True, False])
def test_the_size_cap_truncates(canary: Server, client: httpx.Client, length: bool) -> None:
    body = bytes(range(97, 123)) * 400
    canary.routes["/big"] = _body_route(body, length=length)
    result = http_fetch(client, canary.url("/big"), settings=_settings(max_bytes=1000))
    assert result.truncated is True
    assert result.bytes_read == 1000
    assert result.text == body[:1000].decode()


@pytest.mark.parametrize("length", [True, False])
def test_a_body_exactly_at_the_cap_is_complete(canary: Server, client: httpx.Client, length: bool) -> None:
    canary.routes["/exact"] = _body_route(b"x" * 1000, length=length)
    result = http_fetch(client, canary.url("/exact"), settings=_settings(max_bytes=1000))
    assert (result.truncated, result.bytes_read) == (False, 1000)
    over = http_fetch(client, canary.url("/exact"), settings=_settings(max_bytes=999))
    assert (over.truncated, over.bytes_read) == (True, 999)


def test_an_endless_body_is_cut_without_reading_it(canary: Server, client: httpx.Client) -> None:
    sent: list[int] = []

    def endless(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        chunk = b"y" * 65536
        try:
            for _ in range(2000):  # 128 MiB if anyone read it all
                handler.wfile.write(chunk)
                sent.append(len(chunk))
        except OSError:
            return

    canary.routes["/endless"] = endless
    started = time.monotonic()
    result = http_fetch(client, canary.url("/endless"), settings=_settings(max_bytes=10_000))
    assert time.monotonic() - started < 5
    assert (result.truncated, result.bytes_read) == (True, 10_000)
    time.sleep(0.2)
    assert sum(sent) < 64 * 1024 * 1024


def test_redirects_are_followed_and_reported(
    serve: Callable[..., Server], canary: Server, client: httpx.Client, reply: Callable[..., None]
) -> None:
    hop = serve("127.0.0.2")
    hop.routes["/start"] = lambda h: reply(h, 301, headers={"Location": "/middle"})
    hop.routes["/middle"] = lambda h: reply(h, 302, headers={"Location": canary.url("/end")})
    result = http_fetch(client, hop.url("/start"), settings=LOCAL)
    assert result.text == "canary"
    assert result.url == canary.url("/end")
    assert result.redirects == [hop.url("/start"), hop.url("/middle")]


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_max_redirects_is_enforced(
    canary: Server, client: httpx.Client, reply: Callable[..., None], limit: int
) -> None:
    canary.routes["/loop"] = lambda h: reply(h, 302, headers={"Location": "/loop"})
    with pytest.raises(BadRequest, match=f"more than {limit} redirects"):
        http_fetch(client, canary.url("/loop"), settings=_settings(max_redirects=limit))
    assert len(canary.hits) == limit + 1


def test_redirect_methods(canary: Server, client: httpx.Client, reply: Callable[..., None]) -> None:
    canary.routes["/see-other"] = lambda h: reply(h, 303, headers={"Location": "/"})
    canary.routes["/temporary"] = lambda h: reply(h, 307, headers={"Location": "/"})
    enabled = ("GET", "POST")
    http_fetch(client, canary.url("/see-other"), settings=LOCAL, method="POST", methods=enabled)
    http_fetch(client, canary.url("/temporary"), settings=LOCAL, method="POST", methods=enabled)
    assert [(h.method, h.path) for h in canary.hits] == [
        ("POST", "/see-other"),
        ("GET", "/"),
        ("POST", "/temporary"),
        ("POST", "/"),
    ]


def test_credentials_do_not_follow_a_redirect_to_another_origin(
    serve: Callable[..., Server], canary: Server, client: httpx.Client, reply: Callable[..., None]
) -> None:
    hop = serve("127.0.0.2")
    hop.routes["/same"] = lambda h: reply(h, 302, headers={"Location": "/landing"})
    hop.routes["/away"] = lambda h: reply(h, 302, headers={"Location": canary.url("/landing")})
    headers = {"Authorization": "Bearer t0ken", "X-Trace": "keep"}
    http_fetch(client, hop.url("/same"), settings=LOCAL, headers=headers)
    http_fetch(client, hop.url("/away"), settings=LOCAL, headers=headers)
    landing_same = hop.hits[1].headers
    landing_away = canary.hits[0].headers
    assert landing_same["Authorization"] == "Bearer t0ken"
    assert "Authorization" not in landing_away
    assert landing_away["X-Trace"] == "keep"


def test_a_slow_server_times_out(canary: Server, client: httpx.Client) -> None:
    def slow(handler: BaseHTTPRequestHandler) -> None:
        time.sleep(2)
        _body_route(b"late")(handler)

    canary.routes["/slow"] = slow
    started = time.monotonic()
    with pytest.raises(TaskTimeout):
        http_fetch(client, canary.url("/slow"), settings=_settings(timeout_s=0.5))
    assert time.monotonic() - started < 1.5


def test_a_dripping_body_is_bounded_by_the_whole_fetch_timeout(canary: Server, client: httpx.Client) -> None:
    def drip(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "100")
        handler.end_headers()
        try:
            for _ in range(100):
                handler.wfile.write(b"z")
                handler.wfile.flush()
                time.sleep(0.1)
        except OSError:
            return

    canary.routes["/drip"] = drip
    started = time.monotonic()
    with pytest.raises(TaskTimeout):
        http_fetch(client, canary.url("/drip"), settings=_settings(timeout_s=1.0))
    assert time.monotonic() - started < 2.5


def test_a_refused_connection_is_retryable(client: httpx.Client) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ConnectionFailed):
        http_fetch(client, f"http://127.0.0.1:{port}/", settings=LOCAL)


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("GE T", None),
        ("GET", {"Host": "elsewhere.example"}),
        ("GET", {"X-A": "one\r\nX-Injected: yes"}),
        ("GET", {"Bad Name": "v"}),
        ("GET", {"Transfer-Encoding": "chunked"}),
    ],
)
def test_malformed_input_is_refused(
    canary: Server, client: httpx.Client, method: str, headers: dict[str, str] | None
) -> None:
    with pytest.raises(InvalidInput):
        http_fetch(client, canary.url(), settings=LOCAL, method=method, headers=headers)
    assert canary.hits == []


@pytest.mark.parametrize("method", ["DELETE", "POST", "PUT", "PATCH", "OPTIONS", "delete"])
def test_only_get_and_head_are_sent_unless_the_caller_enables_more(
    canary: Server, client: httpx.Client, method: str
) -> None:
    with pytest.raises(InvalidInput, match="not enabled"):
        http_fetch(client, canary.url("/item"), settings=LOCAL, method=method)
    assert canary.hits == []
    http_fetch(client, canary.url("/item"), settings=LOCAL, method=method, methods=("GET", method))
    assert [hit.method for hit in canary.hits] == [method.upper()]


def test_the_tool_definition_is_a_json_schema() -> None:
    assert HTTP_FETCH_TOOL["name"] == "http_fetch"
    assert HTTP_FETCH_TOOL["description"]
    schema = HTTP_FETCH_TOOL["input_schema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["url"]
    assert set(schema["properties"]) == {"url", "method", "headers"}
    json.dumps(HTTP_FETCH_TOOL)
