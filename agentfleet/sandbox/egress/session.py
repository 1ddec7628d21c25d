"""One connection from a sandbox to its egress proxy, spoken with h11.

Outside a tunnel a request names its destination in absolute form (``GET http://host/path``)
or asks for a tunnel (``CONNECT host:443``). A tunnel to a declared destination is answered
200, then the proxy plays the server's part of TLS with a certificate for that host signed by
the worker's CA, and reads the requests inside like any other: each is sent on through the
fleet transport and its response streamed back, rewritten so no credential value comes back
(``agentfleet.sandbox.egress.scrub``). The connection is kept alive between requests.

Bounds: a request head larger than ``egress.max_header_bytes`` is answered 431; a body
larger than ``egress.max_request_bytes`` is answered 413 (a body is read whole before it is
sent, as the guard searches it for credential values); a response body larger than
``egress.max_response_bytes`` is cut and its connection closed; a connection silent for
``egress.idle_timeout_s`` (waiting for a request, or inside one) is closed.
"""

from __future__ import annotations

import socket
import ssl
from typing import Any
from urllib.parse import urlsplit

import h11
import httpx

from agentfleet.sandbox.egress.core import EgressCore
from agentfleet.sandbox.egress.replies import Reply, reply_for

__all__ = ["Session"]

_CHUNK = 64 * 1024
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
        b"expect",
    }
)


class _Closed(Exception):
    """The peer went away, fell silent, or broke the protocol: drop the connection."""


class Session:
    """Serve one connection (``tunnel``: the host and port of the TLS tunnel it is inside)."""

    def __init__(self, core: EgressCore, sock: socket.socket, tunnel: tuple[str, int] | None = None) -> None:
        self.core = core
        self.sock = sock
        self.tunnel = tunnel
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=core.limits.max_header_bytes)
        sock.settimeout(core.limits.idle_timeout_s)

    def serve(self) -> None:
        """Answer requests until the client closes, a bound is crossed or a tunnel opens."""
        try:
            while True:
                request = self._next()
                if not isinstance(request, h11.Request):
                    return
                if not self._answer(request):
                    return
                if self.conn.our_state is h11.MUST_CLOSE or self.conn.their_state is h11.MUST_CLOSE:
                    return
                self.conn.start_next_cycle()
        except _Closed:
            return
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                text = "request head too large" if status == 431 else f"malformed request ({exc})"
                self._send_reply(Reply(status, text))

    # Reading ------------------------------------------------------------------------------

    def _next(self) -> Any:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = self.sock.recv(_CHUNK)
            except (TimeoutError, OSError):
                raise _Closed from None
            self.conn.receive_data(data)

    def _body(self) -> bytes | None:
        """The request's body, or None when it is larger than the cap."""
        if self.conn.they_are_waiting_for_100_continue:
            self._send(h11.InformationalResponse(status_code=100, headers=[]))
        cap = self.core.limits.max_request_bytes
        parts: list[bytes] = []
        size = 0
        while True:
            event = self._next()
            if isinstance(event, h11.Data):
                size += len(event.data)
                if size > cap:
                    return None
                parts.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            else:
                raise _Closed

    # Answering ----------------------------------------------------------------------------

    def _answer(self, request: h11.Request) -> bool:
        """Answer one request; False when the connection must end (refusal, tunnel, failure)."""
        target = request.target.decode("ascii", "replace")
        head = len(request.target) + sum(len(name) + len(value) + 4 for name, value in request.headers)
        if head > self.core.limits.max_header_bytes:
            self._send_reply(Reply(431, "the request head is larger than egress.max_header_bytes"))
            return False
        if request.method == b"CONNECT":
            return self._connect(target)
        url, reply = self._url(target)
        if reply is None:
            parts = [target.encode()] + [value for _, value in request.headers]
            reply = self.core.credential_refusal(parts, _origin(url))
        if reply is not None:
            self._send_reply(reply)
            return False
        body = self._body()
        if body is None:
            limit = self.core.limits.max_request_bytes
            self._send_reply(
                Reply(413, f"the request body is larger than egress.max_request_bytes ({limit})")
            )
            return False
        return self._relay(request, url, body)

    def _url(self, target: str) -> tuple[str, Reply | None]:
        if self.tunnel is not None:
            host, port = self.tunnel
            if not target.startswith("/"):
                return "", Reply(400, "inside a tunnel, a request names a path (origin form)")
            return f"https://{_authority(host, port)}{target}", self.core.refusal("https", host, port)
        try:
            parts = urlsplit(target)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            return "", Reply(400, f"unparseable request target {target[:200]!r}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return "", Reply(
                400,
                "this is a proxy: send absolute-form requests (GET http://host/path) or CONNECT host:port",
            )
        return target, self.core.refusal(parts.scheme, parts.hostname, port)

    def _connect(self, target: str) -> bool:
        host, port = _split_authority(target)
        if host is None:
            self._send_reply(Reply(400, f"CONNECT needs host:port, not {target[:200]!r}"))
            return False
        refusal = self.core.refusal("https", host, port)
        if refusal is not None:
            self._send_reply(refusal)
            return False
        if not isinstance(self._next(), h11.EndOfMessage):
            return False
        self._send(h11.Response(status_code=200, headers=[], reason=b"Connection established"))
        leftover, _ = self.conn.trailing_data
        if leftover:
            return False
        context = self.core.leaves.context(host)
        # A duplicate, so the proxy's stop() still reaches the connection through the socket it
        # accepted (wrapping would detach that one).
        raw = self.sock.dup()
        raw.settimeout(self.core.limits.idle_timeout_s)
        try:
            tls = context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return False
        try:
            Session(self.core, tls, tunnel=(host, port)).serve()
        finally:
            tls.close()
        return False

    def _relay(self, request: h11.Request, url: str, body: bytes) -> bool:
        headers = _forwarded(request.headers.raw_items())
        try:
            response = self.core.send(request.method.decode("ascii"), url, headers, body)
        except Exception as exc:
            self._send_reply(reply_for(exc, _origin(url)))
            return False
        try:
            return self._stream_back(response)
        finally:
            response.close()

    def _stream_back(self, response: httpx.Response) -> bool:
        reflections = self.core.reflections()
        headers = [
            (name, reflections.replace(value))
            for name, value in response.headers.raw
            if name.lower() not in _HOP_BY_HOP and name.lower() != b"content-encoding"
        ]
        self._send(
            h11.Response(status_code=response.status_code, headers=headers, reason=response.reason_phrase)
        )
        cap = self.core.limits.max_response_bytes
        sent = 0
        try:
            for chunk in reflections.stream(response.iter_bytes(_CHUNK)):
                sent += len(chunk)
                if sent > cap:
                    return False
                if chunk:
                    self._send(h11.Data(data=chunk))
        except httpx.HTTPError:
            return False
        self._send(h11.EndOfMessage())
        return True

    # Writing ------------------------------------------------------------------------------

    def _send(self, event: Any) -> None:
        data = self.conn.send(event)
        if data:
            try:
                self.sock.sendall(data)
            except OSError:
                raise _Closed from None

    def _send_reply(self, reply: Reply) -> None:
        try:
            self._send(h11.Response(status_code=reply.status, headers=reply.headers(), reason=reply.phrase()))
            self._send(h11.Data(data=reply.body()))
            self._send(h11.EndOfMessage())
        except (_Closed, h11.LocalProtocolError):
            return


def _forwarded(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request headers to send on (names as the client spelt them): no hop-by-hop ones,
    and only encodings the proxy can decode."""
    named = {
        token.strip().lower()
        for name, value in raw
        if name.lower() == b"connection"
        for token in value.split(b",")
    }
    dropped = _HOP_BY_HOP | named | {b"accept-encoding"}
    kept = [(name, value) for name, value in raw if name.lower() not in dropped]
    # The proxy decodes each body to search it for credential values, so it asks only for
    # encodings httpx decodes, and sends the body on decoded.
    kept.append((b"Accept-Encoding", b"gzip, deflate"))
    return kept


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _origin(url: str) -> str:
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}"
    except ValueError:
        return url[:200]


def _split_authority(target: str) -> tuple[str | None, int]:
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        return None, 0
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return (host or None), int(port)
