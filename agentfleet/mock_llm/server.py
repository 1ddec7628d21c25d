"""The mock Messages API: a real HTTP server on loopback that the official Anthropic SDK can call.

``POST /v1/messages`` (plain JSON, or server-sent events with ``"stream": true``) and
``POST /v1/messages/count_tokens``. Replies come from ``MockModel``. Every ``/v1`` response
carries ``request-id``; ``/v1/messages`` responses carry the ``anthropic-ratelimit-*`` headers.

Each request to ``/v1/messages`` goes through, in order:

1. authentication: an ``x-api-key`` or ``Authorization: Bearer`` key is required, and must be
   one of ``api_key`` when that is set (else 401 ``authentication_error``);
2. a body over ``max_body_bytes`` is 413; a malformed one 400; a model outside ``models``
   (when set) 404;
3. the next scripted reply, if any (``script``), answers instead of steps 4 and 5;
4. the rate limits: over a per-minute limit, 429 ``rate_limit_error`` with ``retry-after``
   (whole seconds until the request would fit);
5. the injected error rates (``error_rates``), e.g. 529 ``overloaded_error``, 500 ``api_error``;
6. the model's reply, after the drawn latency (plus any ``SLEEP`` directive).

Errors from steps 1 to 5 are answered at once; only replies wait for the latency.

Runtime control, for tests in other processes (no key needed; the server listens on loopback):
``GET /_mock/stats``, ``GET /_mock/requests``, ``POST /_mock/script`` (a JSON list of replies,
or ``{"replies": [...]}``), ``DELETE /_mock/script``, ``POST /_mock/config`` (any of
``latency``, ``error_rates``, ``requests_per_min``, ``input_tokens_per_min``,
``output_tokens_per_min``, ``tokens_per_min``) and ``POST /_mock/reset``.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict
from types import TracebackType
from typing import Any

from agentfleet.errors import MockRequestInvalid, MockSetupInvalid
from agentfleet.mock_llm.endpoint import MessagesEndpoint, RequestRecord
from agentfleet.mock_llm.http_server import Exchange, TrackedHTTPServer
from agentfleet.mock_llm.policy import ErrorInjector, Latency, ScriptedReply

__all__ = [
    "DEFAULT_PORT",
    "MockMessagesServer",
    "RequestRecord",
    "parse_error_rates",
    "serve",
]

DEFAULT_PORT = 8765
_STOP_JOIN_S = 5.0


def parse_error_rates(specs: Iterable[str]) -> dict[int, float]:
    """``["529=0.05", "500=0.01"]`` (or one comma-separated string each) as ``{529: 0.05, ...}``."""
    rates: dict[int, float] = {}
    for spec in specs:
        for part in filter(None, (p.strip() for p in spec.split(","))):
            status, _, rate = part.partition("=")
            try:
                rates[int(status)] = float(rate)
            except ValueError:
                raise MockSetupInvalid(
                    f"mock error rate {part!r} is not STATUS=RATE (for example 529=0.05)"
                ) from None
    return ErrorInjector.check_rates(rates)


class MockMessagesServer:
    """The mock Messages API on ``host:port`` (port 0: a free port), in background threads.

    ``latency``: seconds, a ``Latency``, or a spec such as ``"uniform:0.5,1.5"``.
    ``*_per_min``: per-minute limits (None: unlimited). ``error_rates``: HTTP status to the
    probability of answering it. ``api_key``: the accepted key or keys (None: any key).
    ``models``: the model names served (None: any). ``seed`` makes latency draws, injected
    errors and ids repeatable for one sequence of requests.

    Use it as a context manager, or call ``start()`` and ``stop()``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        latency: float | str | Latency = 0.0,
        requests_per_min: float | None = None,
        input_tokens_per_min: float | None = None,
        output_tokens_per_min: float | None = None,
        tokens_per_min: float | None = None,
        error_rates: Mapping[int, float] | None = None,
        seed: int = 0,
        api_key: str | Collection[str] | None = None,
        models: Collection[str] | None = None,
        max_body_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        self.host = host
        self._port = port
        self._stopping = threading.Event()
        self.endpoint = MessagesEndpoint(
            latency=latency,
            limits={
                "requests_per_min": requests_per_min,
                "input_tokens_per_min": input_tokens_per_min,
                "output_tokens_per_min": output_tokens_per_min,
                "tokens_per_min": tokens_per_min,
            },
            error_rates=error_rates,
            seed=seed,
            api_key=api_key,
            models=models,
            max_body_bytes=max_body_bytes,
            stopping=self._stopping,
        )
        self._httpd: TrackedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # Lifecycle ----------------------------------------------------------------------------

    def start(self) -> MockMessagesServer:
        """Bind and serve in a background thread; returns self."""
        if self._httpd is not None:
            raise MockSetupInvalid("this mock server is already started; make a new one")
        try:
            self._httpd = TrackedHTTPServer((self.host, self._port), self._route)
        except OSError as exc:
            raise MockSetupInvalid(
                f"mock Messages API cannot listen on {self.host}:{self._port} ({exc.strerror}); "
                "choose another --port"
            ) from None
        self._port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="mock-llm-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, drop open connections and wait for every server thread to end."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        httpd.close_connections(_STOP_JOIN_S)
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(_STOP_JOIN_S)

    def __enter__(self) -> MockMessagesServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port listened on (known once started)."""
        return self._port

    @property
    def url(self) -> str:
        """The base URL to give the SDK, e.g. ``http://127.0.0.1:54321``."""
        return f"http://{self.host}:{self._port}"

    @property
    def open_connections(self) -> int:
        """Client connections whose threads are running."""
        return self._httpd.open_connections if self._httpd is not None else 0

    # Control ------------------------------------------------------------------------------

    def script(self, replies: Iterable[int | Mapping[str, Any] | ScriptedReply]) -> int:
        """Queue exact replies for the next requests, in arrival order; returns how many wait.

        ``server.script([{"status": 429, "retry_after_s": 2}, 200])``: a 429 with
        ``retry-after: 2``, then a normal reply. See ``ScriptedReply`` for the fields.
        """
        return self.endpoint.script(replies)

    def clear_script(self) -> None:
        """Forget the scripted replies not used yet."""
        self.endpoint.clear_script()

    def configure(
        self,
        *,
        latency: float | str | Latency | None = None,
        error_rates: Mapping[int, float] | None = None,
        **limits: float | None,
    ) -> None:
        """Change latency, error rates or limits while serving; a changed limit starts full."""
        self.endpoint.configure(latency=latency, error_rates=error_rates, **limits)

    def reset(self) -> None:
        """Forget the request log, the script and the counters; refill the limits."""
        self.endpoint.reset()

    @property
    def requests(self) -> list[RequestRecord]:
        """The request log, in order of arrival."""
        return self.endpoint.requests

    def stats(self) -> dict[str, Any]:
        """Counters and settings, as ``GET /_mock/stats`` returns them."""
        return self.endpoint.stats()

    # Routing ------------------------------------------------------------------------------

    def _route(self, exchange: Exchange) -> None:
        routes: dict[tuple[str, str], Callable[[Exchange], None]] = {
            ("POST", "/v1/messages"): self.endpoint.messages,
            ("POST", "/v1/messages/count_tokens"): self.endpoint.count_tokens,
            ("GET", "/_mock/stats"): lambda x: x.send_json(200, self.stats()),
            ("GET", "/_mock/requests"): lambda x: x.send_json(200, [asdict(r) for r in self.requests]),
            ("POST", "/_mock/script"): self._control_script,
            ("DELETE", "/_mock/script"): self._control_clear_script,
            ("POST", "/_mock/config"): self._control_config,
            ("POST", "/_mock/reset"): self._control_reset,
        }
        route = routes.get((exchange.method, exchange.path))
        if route is not None:
            route(exchange)
            return
        self.endpoint.not_found(exchange)

    # Control endpoints --------------------------------------------------------------------

    def _control_body(self, exchange: Exchange) -> Any:
        try:
            return json.loads(exchange.read_body() or b"null")
        except ValueError:
            raise MockRequestInvalid("control request body is not JSON", status_code=400) from None

    def _control(self, exchange: Exchange, action: Callable[[Any], Any]) -> None:
        try:
            exchange.send_json(200, action(self._control_body(exchange)))
        except (MockRequestInvalid, MockSetupInvalid) as exc:
            exchange.send_json(400, {"error": exc.message})
        except (TypeError, ValueError) as exc:
            exchange.send_json(400, {"error": f"bad control request: {exc}"})

    def _control_script(self, exchange: Exchange) -> None:
        def action(body: Any) -> Any:
            replies = body.get("replies") if isinstance(body, dict) else body
            if not isinstance(replies, list):
                raise MockRequestInvalid('send a JSON list of replies, or {"replies": [...]}')
            return {"scripted_pending": self.script(replies)}

        self._control(exchange, action)

    def _control_clear_script(self, exchange: Exchange) -> None:
        def action(_: Any) -> Any:
            self.clear_script()
            return {"scripted_pending": 0}

        self._control(exchange, action)

    def _control_config(self, exchange: Exchange) -> None:
        def action(body: Any) -> Any:
            if not isinstance(body, dict):
                raise MockRequestInvalid("send a JSON object of settings")
            options = dict(body)
            rates = options.pop("error_rates", None)
            self.configure(
                latency=options.pop("latency", None),
                error_rates={int(k): float(v) for k, v in rates.items()} if rates else rates,
                **options,
            )
            return self.stats()

        self._control(exchange, action)

    def _control_reset(self, exchange: Exchange) -> None:
        def action(_: Any) -> Any:
            self.reset()
            return self.stats()

        self._control(exchange, action)


def serve(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    on_ready: Callable[[MockMessagesServer], None] | None = None,
    stop: threading.Event | None = None,
    **options: Any,
) -> None:
    """Run a mock server until ``stop`` is set, SIGINT (KeyboardInterrupt) or SIGTERM.

    ``options`` are ``MockMessagesServer``'s keyword arguments. ``on_ready`` is called once the
    server listens (for example to print its URL). Returns after the server has stopped.
    """
    stop = stop or threading.Event()
    server = MockMessagesServer(host, port, **options).start()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        if on_ready is not None:
            on_ready(server)
        # A timed wait keeps the main thread responsive to Ctrl-C on every platform.
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
