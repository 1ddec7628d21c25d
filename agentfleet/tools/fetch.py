"""The ``http_fetch`` agent tool: one guarded HTTP request, redirects followed one hop at a time.

``http_fetch`` follows redirects itself (never the client), so every hop is a separate
request that the guard transport checks and pins again. The body is streamed and reading
stops at ``fetch.max_bytes``. ``fetch.timeout_s`` bounds the whole fetch, every hop and the
body included.

The client passed in must have the guard transport (``agentfleet.tools.guard``) somewhere
under it: that is what resolves, checks and pins names. ``http_fetch`` itself refuses
forbidden schemes and literal addresses early, without DNS.

A fetch reads: only ``GET`` and ``HEAD`` are sent unless the caller enables other methods
with ``methods=``. The agent tool sends only what its schema declares, whatever method the
model names.
"""

from __future__ import annotations

import codecs
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

import httpx
from pydantic import BaseModel

from agentfleet.config import FetchSettings
from agentfleet.errors import (
    AgentfleetError,
    BadRequest,
    ConnectionFailed,
    ForbiddenDestination,
    InvalidInput,
    TaskTimeout,
)
from agentfleet.tools.ssrf import Allowlist, precheck_url
from agentfleet.tools.vault import CredentialVault, references

__all__ = ["HTTP_FETCH_TOOL", "READ_METHODS", "FetchResult", "declared_methods", "http_fetch"]

READ_METHODS: tuple[str, ...] = ("GET", "HEAD")

HTTP_FETCH_TOOL: dict[str, Any] = {
    "name": "http_fetch",
    "description": (
        "Fetch a public http or https URL and return its status, final URL, headers and text "
        "(cut at a size limit). Private, loopback and cloud-metadata addresses are refused. "
        "To authenticate, put $CRED{name} in a header value or the URL; the configured "
        "credential is filled in only for the domains it is allowed for."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "An absolute http:// or https:// URL."},
            "method": {
                "type": "string",
                "enum": list(READ_METHODS),
                "default": "GET",
                "description": "The HTTP method.",
            },
            "headers": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "Extra request headers, for example an Accept header.",
            },
        },
        "required": ["url"],
        "additionalProperties": False,
    },
}

_REDIRECTS = {301, 302, 303, 307, 308}
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CALLER_MAY_NOT_SET = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
}
# Dropped when a redirect leaves the origin, as browsers do, so they go nowhere unintended.
_ORIGIN_BOUND = {"authorization", "cookie", "proxy-authorization"}


class FetchResult(BaseModel):
    """The outcome of a fetch.

    ``url`` is the final URL after redirects; ``redirects`` the URLs that redirected, in
    order. ``text`` is the body decoded with its declared charset (UTF-8 by default, bad
    bytes replaced). ``bytes_read`` counts body bytes kept (at most ``fetch.max_bytes``);
    ``truncated`` is True when the body was longer and reading stopped at the cap.
    """

    status: int
    url: str
    headers: dict[str, str]
    text: str
    truncated: bool
    bytes_read: int
    redirects: list[str]


def _check_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    clean: dict[str, str] = {}
    for key, value in (headers or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInput("http_fetch: header names and values must be strings")
        if not _TOKEN.fullmatch(key):
            raise InvalidInput(f"http_fetch: {key!r} is not a valid header name")
        if any(ch in value for ch in "\r\n\x00"):
            raise InvalidInput(f"http_fetch: the value of header {key!r} has a line break")
        if key.lower() in _CALLER_MAY_NOT_SET:
            raise InvalidInput(f"http_fetch: header {key!r} is set by the client, not the caller")
        clean[key] = value
    return clean


def declared_methods(tool: Mapping[str, Any]) -> tuple[str, ...]:
    """The HTTP methods a tool definition's ``method`` property allows (its ``enum``)."""
    prop = tool["input_schema"]["properties"]["method"]
    return tuple(str(m).upper() for m in prop.get("enum", READ_METHODS))


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def _redirect_method(method: str, status: int) -> str:
    if status == 303 and method != "HEAD":
        return "GET"
    if status in (301, 302) and method == "POST":
        return "GET"
    return method


def _decode(body: bytes, charset: str | None) -> str:
    encoding = "utf-8"
    if charset:
        try:
            encoding = codecs.lookup(charset).name
        except LookupError:
            encoding = "utf-8"
    return body.decode(encoding, errors="replace")


def _scrubbed(text: str, vault: CredentialVault | None) -> str:
    return vault.scrub(text) if vault is not None else text


def http_fetch(
    client: httpx.Client,
    url: str,
    *,
    settings: FetchSettings,
    method: str = "GET",
    headers: Mapping[str, str] | None = None,
    vault: CredentialVault | None = None,
    methods: Iterable[str] = READ_METHODS,
) -> FetchResult:
    """Fetch ``url`` through ``client``, following up to ``settings.max_redirects`` redirects.

    Raises ``ForbiddenDestination`` for a refused scheme or destination (any hop),
    ``InvalidInput`` for a malformed URL or header or a method outside ``methods`` (by
    default ``GET`` and ``HEAD``: a task enables others explicitly), ``BadRequest`` when there are
    more redirects than allowed, ``TaskTimeout`` when ``settings.timeout_s`` seconds pass,
    and ``ConnectionFailed`` when the connection fails. HTTP error statuses are returned,
    not raised. With ``vault``, any credential value a server echoes back is replaced by its
    placeholder in the result.
    """
    verb = _checked_method(method, methods)
    hop_headers = _check_headers(headers)
    hop_headers.setdefault("Accept-Encoding", "identity")
    allowlist = Allowlist(settings.allow_private_hosts)
    deadline = time.monotonic() + settings.timeout_s
    redirects: list[str] = []
    current = url
    while True:
        precheck_url(current, allowlist)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TaskTimeout(f"http_fetch: gave up after {settings.timeout_s:g} s")
        try:
            request = client.build_request(verb, current, headers=hop_headers, timeout=remaining)
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise InvalidInput(f"http_fetch: {_scrubbed(str(exc), vault)}") from None
        response = _send(client, request, vault)
        try:
            location = response.headers.get("location")
            if response.status_code not in _REDIRECTS or not location:
                return _read(response, request, settings, deadline, redirects, vault)
            following = _redirect_target(response, request, location, len(redirects), settings)
        finally:
            response.close()
        redirects.append(str(request.url))
        if not _same_origin(request.url, following):
            hop_headers = _cross_origin(hop_headers)
        verb = _redirect_method(verb, response.status_code)
        current = str(following)


def _checked_method(method: str, methods: Iterable[str]) -> str:
    """``method`` in upper case; ``InvalidInput`` unless it is an HTTP method among ``methods``."""
    verb = method.upper()
    if not _TOKEN.fullmatch(verb):
        raise InvalidInput(f"http_fetch: {method!r} is not an HTTP method")
    allowed = tuple(m.upper() for m in methods)
    if verb not in allowed:
        raise InvalidInput(
            f"http_fetch: method {verb} is not enabled (enabled: {', '.join(allowed)}); "
            "a task enables others with http_fetch(..., methods=...)"
        )
    return verb


def _redirect_target(
    response: Any, request: httpx.Request, location: str, followed: int, settings: FetchSettings
) -> httpx.URL:
    """Where a redirect leads, ``followed`` redirects in: ``BadRequest`` past the most allowed,
    ``ForbiddenDestination`` for a credential placeholder or an unusable location."""
    if followed >= settings.max_redirects:
        raise BadRequest(
            f"http_fetch: more than {settings.max_redirects} redirects",
            status_code=response.status_code,
            downstream=request.url.host,
        )
    if references(location):
        raise ForbiddenDestination("http_fetch: a redirect named a credential placeholder")
    try:
        return request.url.join(location)
    except httpx.InvalidURL as exc:
        raise ForbiddenDestination(f"http_fetch: unusable redirect ({exc})") from None


def _cross_origin(headers: dict[str, str]) -> dict[str, str]:
    """The headers a redirect to another origin keeps: none bound to the origin, no placeholder."""
    return {
        key: value
        for key, value in headers.items()
        if key.lower() not in _ORIGIN_BOUND and not references(value)
    }


def _send(client: httpx.Client, request: httpx.Request, vault: CredentialVault | None) -> Any:
    try:
        return client.send(request, stream=True, follow_redirects=False)
    except AgentfleetError:
        raise
    except httpx.InvalidURL as exc:
        # httpx parses a redirect's Location even when not following it.
        raise ForbiddenDestination(f"http_fetch: unusable redirect ({exc})") from None
    except httpx.RemoteProtocolError as exc:
        if "location header" in str(exc).lower():
            raise ForbiddenDestination(f"http_fetch: unusable redirect ({exc})") from None
        raise ConnectionFailed(
            f"http_fetch: {type(exc).__name__}: {_scrubbed(str(exc), vault)}", downstream=request.url.host
        ) from None
    except httpx.TimeoutException as exc:
        raise TaskTimeout(
            f"http_fetch: {_scrubbed(str(exc), vault) or 'timed out'}", downstream=request.url.host
        ) from None
    except httpx.TransportError as exc:
        raise ConnectionFailed(
            f"http_fetch: {type(exc).__name__}: {_scrubbed(str(exc), vault)}",
            downstream=request.url.host,
        ) from None


def _read(
    response: httpx.Response,
    request: httpx.Request,
    settings: FetchSettings,
    deadline: float,
    redirects: list[str],
    vault: CredentialVault | None,
) -> FetchResult:
    cap = settings.max_bytes
    declared = response.headers.get("content-length", "")
    truncated = declared.isdigit() and int(declared) > cap
    body = bytearray()
    try:
        chunks = response.iter_bytes()
        for chunk in chunks:
            room = cap - len(body)
            if len(chunk) > room:
                body += chunk[:room]
                truncated = True
                break
            body += chunk
            if time.monotonic() > deadline:
                raise TaskTimeout(
                    f"http_fetch: the body took longer than {settings.timeout_s:g} s",
                    downstream=request.url.host,
                )
            if len(body) == cap:
                # Exactly at the cap: one more read tells a complete body from a longer one.
                truncated = truncated or any(extra for extra in chunks)
                break
    except httpx.TimeoutException:
        raise TaskTimeout(
            f"http_fetch: reading the body timed out after {settings.timeout_s:g} s",
            downstream=request.url.host,
        ) from None
    except httpx.TransportError as exc:
        raise ConnectionFailed(
            f"http_fetch: the body broke off ({type(exc).__name__})", downstream=request.url.host
        ) from None
    headers = {key: _scrubbed(value, vault) for key, value in response.headers.items()}
    return FetchResult(
        status=response.status_code,
        url=_scrubbed(str(request.url), vault),
        headers=headers,
        text=_scrubbed(_decode(bytes(body), response.charset_encoding), vault),
        truncated=truncated,
        bytes_read=len(body),
        redirects=[_scrubbed(hop, vault) for hop in redirects],
    )
