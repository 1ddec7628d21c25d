"""The guard layer: SSRF check, address pinning and credential injection for live requests.

It is an HTTP transport that sits under the fleet transport and over the real connection
pool, and works for ``httpx`` and for ``httpx2`` (the package the Anthropic SDK is built on):
both expose the same ``BaseTransport.handle_request(request) -> Response`` shape, so the
layer is written once against that shape and instantiated per module::

    guard = guard_transport(httpx, settings=settings.fetch, vault=vault, task_id=task_id)
    # the fleet transport (limits, accounting) calls guard.handle_request(request) last

For every request (every redirect hop is a separate request) it:

1. refuses any scheme but http and https, and any host that does not resolve only to
   global addresses (``agentfleet.tools.ssrf``), unless ``fetch.allow_private_hosts``
   opens it;
2. pins the connection: the request sent on is a copy whose URL names the checked address,
   with the original ``Host`` header and, for https, ``extensions["sni_hostname"]`` set to
   the original name, so TLS sends that name and verifies the certificate against it
   (httpcore and httpcore2 both read ``sni_hostname`` when they open a TLS connection). No
   second DNS lookup happens, so a rebinding answer is never used. If connecting to the
   first checked address fails, the next checked address is tried;
3. fills in ``$CRED{name}`` placeholders in header values and the URL's path and query on
   that copy only, after the vault has allowed the host and audited the use;
4. refuses a request that carries a credential's value itself (in the URL, a header name or
   value, or the body; plain, percent- or form-encoded, or base64) to a host outside that
   credential's domains. This runs before the host name is resolved, so a value in the host
   name never reaches a DNS server either. A value going to an allowed host is audited like
   a filled-in placeholder. To be searched, a streamed request body is read into memory
   before it is sent.

Connections are pooled per original host name for https: the pool keys connections by the
address it dials, so two names on one address must not share a TLS session verified for
only one of them.

The copy carrying secrets never escapes: the response's ``request`` is the caller's request
(placeholders intact), and an error raised while the copy is in flight, or while its response
body is read, is replaced by a fresh error of the same type whose message has every secret
put back as its placeholder, with no traceback frames of the send and no chained cause.
"""

from __future__ import annotations

import copy
import functools
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import httpx

from agentfleet.config import FetchSettings
from agentfleet.errors import AgentfleetError, ForbiddenDestination, UnexpectedError
from agentfleet.tools.spellings import authorization_payloads
from agentfleet.tools.ssrf import (
    Address,
    Allowlist,
    Resolver,
    Target,
    check_host,
    check_scheme,
    default_port,
    normalize_host,
    system_resolver,
)
from agentfleet.tools.vault import CredentialVault, references

__all__ = ["TaskIdSource", "guard_transport", "httpx2_guard", "httpx_guard"]

TaskIdSource = str | Callable[[], str | None] | None
"""The task id for the audit log: fixed, read from a callable at each request, or unknown."""

DEFAULT_MAX_POOLS = 64


def _forget(exc: BaseException | None) -> None:
    # Frames of a finished send hold the request that carried secrets, in a reference cycle
    # with the error; clearing their locals frees that copy now rather than at the next GC.
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if exc.__traceback__ is not None:
            traceback.clear_frames(exc.__traceback__)
            exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__


def _connect_timeout(request: Any) -> float | None:
    timeouts = request.extensions.get("timeout") or {}
    value = timeouts.get("connect") if isinstance(timeouts, dict) else None
    return float(value) if isinstance(value, int | float) else None


class _GuardCore:
    """The module-independent logic; ``_classes`` mixes it into each module's BaseTransport."""

    _module: ModuleType

    def __init__(
        self,
        *,
        allowlist: Allowlist,
        vault: CredentialVault | None,
        resolver: Resolver,
        transport_factory: Callable[[], Any],
        task_id: TaskIdSource,
        max_pools: int,
    ) -> None:
        self._allowlist = allowlist
        self._vault = vault
        self._resolver = resolver
        self._factory = transport_factory
        self._task_id = task_id
        self._max_pools = max_pools
        self._pools: OrderedDict[tuple[str, str, int], Any] = OrderedDict()
        self._lock = threading.Lock()

    # The transport interface ----------------------------------------------------------

    def handle_request(self, request: Any) -> Any:
        """Check, pin, fill in credentials and send ``request``; the response of the wire copy.

        Raises ``ForbiddenDestination`` before anything is sent when the destination or a
        credential's domain is refused, and whatever the real transport raises otherwise.
        """
        names = self._references(request)
        carried = self._carried(request)
        vault = self._vault
        if names and vault is None:
            raise ForbiddenDestination(
                f"the request names credential {names[0]!r} but no vault is configured",
                downstream=str(request.url.host),
            )
        if carried and vault is not None:
            # Before the SSRF check resolves the host: a value in a host name leaks by DNS.
            host = normalize_host(request.url.raw_host.decode("ascii", "replace"))
            vault.check_domains(carried, host, as_value=True)
        target = self.check(request)
        if vault is not None and (names or carried):
            vault.authorize(
                [*names, *carried],
                target.host,
                secure=target.scheme == "https" or target.opened_by_allowlist,
                task_id=self._current_task_id(),
            )
        pool = self._pool_for(target)
        if not (names or carried):
            return self._finish(self._exchange(pool, request, target, False), request, False)
        failure: BaseException | None = None
        try:
            response = self._exchange(pool, request, target, True)
        except BaseException as exc:
            failure = self._sanitized(exc, request)
            _forget(exc)
        else:
            return self._finish(response, request, True)
        # Raised outside the handler, so the new error has no implicit context to chain.
        raise failure

    def close(self) -> None:
        """Close every real transport this guard opened."""
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close()

    # Decisions --------------------------------------------------------------------------

    def check(self, request: Any) -> Target:
        """The checked ``Target`` of ``request``; raises ``ForbiddenDestination`` if refused."""
        url = request.url
        scheme = check_scheme(url.scheme)
        if references(url.raw_host):
            raise ForbiddenDestination("refused a credential placeholder in the host name")
        host = normalize_host(url.raw_host.decode("ascii", "replace"))
        port = url.port or default_port(scheme)
        return check_host(
            host,
            port,
            scheme=scheme,
            allowlist=self._allowlist,
            resolver=self._resolver,
            timeout_s=_connect_timeout(request),
        )

    def _references(self, request: Any) -> list[str]:
        found = references(request.url.raw_path)
        for _, value in request.headers.raw:
            found.extend(name for name in references(value) if name not in found)
        return found

    def _carried(self, request: Any) -> list[str]:
        """The credentials whose value (not placeholder) ``request`` carries anywhere."""
        if self._vault is None:
            return []
        url = request.url
        headers = list(request.headers.raw)
        parts = [url.raw_host, url.userinfo, url.raw_path]
        parts.extend(key + b": " + value for key, value in headers)
        parts.append(request.read())
        return self._vault.carried(parts, decoded=authorization_payloads(headers))

    def _current_task_id(self) -> str | None:
        source = self._task_id
        return source() if callable(source) else source

    # Sending ----------------------------------------------------------------------------

    def _pool_for(self, target: Target) -> Any:
        key = (target.scheme, target.host, target.port) if target.scheme == "https" else ("", "", 0)
        evicted = None
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._factory()
                self._pools[key] = pool
                if len(self._pools) > self._max_pools:
                    _, evicted = self._pools.popitem(last=False)
            else:
                self._pools.move_to_end(key)
        if evicted is not None:
            evicted.close()
        return pool

    def _wire_request(self, request: Any, target: Target, address: Address, secret: bool) -> Any:
        url = request.url
        raw_path = url.raw_path
        headers = list(request.headers.raw)
        if secret and self._vault is not None:
            raw_path = self._vault.substitute(raw_path, in_url=True)
            headers = [(key, self._vault.substitute(value, in_url=False)) for key, value in headers]
        if not any(key.lower() == b"host" for key, _ in headers):
            headers.insert(0, (b"Host", url.netloc))
        extensions = dict(request.extensions)
        if target.scheme == "https" and not target.is_ip_literal:
            extensions["sni_hostname"] = target.host
        return self._module.Request(
            request.method,
            url.copy_with(host=str(address), raw_path=raw_path),
            headers=headers,
            stream=request.stream,
            extensions=extensions,
        )

    def _exchange(self, pool: Any, request: Any, target: Target, secret: bool) -> Any:
        *earlier, last = target.addresses
        for address in earlier:
            try:
                return pool.handle_request(self._wire_request(request, target, address, secret))
            except self._module.ConnectError:
                # Nothing was sent yet, so the next checked address can be tried safely.
                continue
        return pool.handle_request(self._wire_request(request, target, last, secret))

    def _finish(self, response: Any, request: Any, secret: bool) -> Any:
        response.request = request
        if secret:
            response.stream = _classes(self._module)[1](response.stream, self, request)
        return response

    def _sanitized(self, exc: BaseException, request: Any) -> BaseException:
        message = str(exc)
        if self._vault is not None:
            message = self._vault.scrub(message)
        if isinstance(exc, AgentfleetError):
            clone = copy.copy(exc)
            clone.args = (message,)
            clone.message = message
            return clone
        try:
            fresh = type(exc)(message)
        except Exception:
            return UnexpectedError(f"{type(exc).__name__}: {message}")
        if isinstance(fresh, self._module.RequestError):
            fresh.request = request
        return fresh


class _ScrubbingStreamCore:
    """A response body whose read errors are sanitised like the send's errors."""

    def __init__(self, inner: Any, guard: _GuardCore, request: Any) -> None:
        self._inner = inner
        self._guard = guard
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._inner)
        while True:
            failure: BaseException | None = None
            try:
                chunk = next(chunks)
            except StopIteration:
                return
            except Exception as exc:
                failure = self._guard._sanitized(exc, self._request)
                _forget(exc)
            if failure is not None:
                raise failure
            yield chunk

    def close(self) -> None:
        self._inner.close()


@functools.cache
def _ssl_context(module: ModuleType) -> Any:
    # A guard is made per task execution and makes its pool lazily, after the limiter has
    # let the call through: whatever that costs delays the call past its grant, holds its
    # concurrency slot and bunches arrivals at the downstream. Two costs are paid here once
    # per process instead, when the first guard is made: a verifying SSL context (parsing
    # the CA bundle, tens of milliseconds; ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` are read
    # then) and the transport's own imports, which httpx defers to its first transport.
    context = module.create_ssl_context()
    module.HTTPTransport(verify=context).close()
    return context


def _default_factory(module: ModuleType) -> Callable[[], Any]:
    return functools.partial(module.HTTPTransport, verify=_ssl_context(module))


@functools.cache
def _classes(module: ModuleType) -> tuple[type[Any], type[Any]]:
    guard = type(
        "GuardTransport",
        (_GuardCore, module.BaseTransport),
        {"_module": module, "__module__": __name__, "__doc__": _GuardCore.__doc__},
    )
    stream = type(
        "ScrubbingStream",
        (_ScrubbingStreamCore, module.SyncByteStream),
        {"__module__": __name__},
    )
    return guard, stream


def guard_transport(
    module: ModuleType,
    *,
    settings: FetchSettings | None = None,
    vault: CredentialVault | None = None,
    resolver: Resolver = system_resolver,
    transport_factory: Callable[[], Any] | None = None,
    task_id: TaskIdSource = None,
    max_pools: int = DEFAULT_MAX_POOLS,
) -> Any:
    """A guard transport for ``module`` (``httpx`` or ``httpx2``), an instance of its BaseTransport.

    ``settings`` gives ``allow_private_hosts``; ``vault`` resolves ``$CRED{...}``
    placeholders (without one, a request naming a credential is refused);
    ``resolver(host, port)`` returns addresses (``getaddrinfo`` by default);
    ``transport_factory()`` makes the real transport below (by default a
    ``module.HTTPTransport`` on one SSL context shared by the process; it must not use a
    proxy, which would resolve names itself). One real transport
    is made per https host, at most ``max_pools`` kept (least recently used closed first).
    """
    fetch = settings or FetchSettings()
    factory = transport_factory or _default_factory(module)
    guard_cls = _classes(module)[0]
    return guard_cls(
        allowlist=Allowlist(fetch.allow_private_hosts),
        vault=vault,
        resolver=resolver,
        transport_factory=factory,
        task_id=task_id,
        max_pools=max_pools,
    )


def httpx_guard(**kwargs: Any) -> httpx.BaseTransport:
    """``guard_transport(httpx, ...)``, typed for ``httpx.Client(transport=...)``."""
    transport: httpx.BaseTransport = guard_transport(httpx, **kwargs)
    return transport


def httpx2_guard(**kwargs: Any) -> Any:
    """``guard_transport(httpx2, ...)``, for the client the Anthropic SDK is built on."""
    import httpx2

    return guard_transport(httpx2, **kwargs)
