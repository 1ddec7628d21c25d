"""Throttling token guesses: an ASGI middleware in front of everything that checks a token.

A request *tries credentials* when it carries an ``Authorization`` header or is a console
sign-in (``POST .../login``). For those, before the app sees them, the client's address is
looked up in ``access.AuthThrottle``: a client still locked out is answered 429 with
``Retry-After`` and its credentials are not checked (so a guess made while locked out tells
nothing, right or wrong). After the app answered, a 401 counts as a failed check (logged with
the address, the method and the path, never what was sent), and a check the app marked as
passed (``mark_authenticated``, or an authenticated ``scope["user"]``) forgets the client's
failures. Requests that try nothing (``/health``, ``/metrics``, a signed-in
session's pages) pass untouched, so a probe or an operator behind the same address as a
guesser keeps working.

The same middleware guards ``agentfleet serve`` and ``agentfleet mcp --transport http``;
Redis holds the counts, so every process agrees. When Redis does not answer the check is
skipped (the token check itself still runs) and a warning is logged.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import redis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentfleet.access import AuthThrottle, client_key, retry_after

__all__ = ["AuthGuard", "mark_authenticated"]

log = logging.getLogger("agentfleet.service.guard")

_UNAUTHORIZED = 401
_TOO_MANY = 429


_PASSED = "agentfleet_credentials_passed"


def mark_authenticated(scope: Scope) -> None:
    """Tell the guard that this request's credentials passed their check."""
    scope.setdefault("state", {})[_PASSED] = True


def _passed(scope: Scope) -> bool:
    user = scope.get("user")
    return bool(scope.get("state", {}).get(_PASSED) or getattr(user, "is_authenticated", False))


def _tries_credentials(scope: Scope) -> bool:
    if any(name == b"authorization" for name, _ in scope.get("headers", ())):
        return True
    return scope.get("method") == "POST" and str(scope.get("path", "")).rstrip("/").endswith("/login")


class AuthGuard:
    """Wraps ``app``: locked-out clients get 429, failed checks are counted (module docstring)."""

    def __init__(self, app: ASGIApp, throttle: AuthThrottle) -> None:
        self.app = app
        self.throttle = throttle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _tries_credentials(scope):
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        who = client_key(client[0] if client else None)
        wait_s = await self._call(self.throttle.wait_s, who)
        if wait_s:
            await self._refuse(send, wait_s)
            return
        status: dict[str, int] = {}

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        await self.app(scope, receive, watched)
        code = status.get("code", 0)
        if code == _UNAUTHORIZED:
            failure = await self._call(self.throttle.failed, who)
            if failure is not None:
                locked = f"; locked out for {failure.lockout_s:g} s" if failure.lockout_s else ""
                log.warning(
                    "failed credential check from %s on %s %s (failure %d%s)",
                    who,
                    scope.get("method"),
                    scope.get("path"),
                    failure.count,
                    locked,
                )
        elif code < 400 and _passed(scope):
            await self._call(self.throttle.passed, who)

    @staticmethod
    async def _call(fn: Any, who: str) -> Any:
        try:
            return await anyio.to_thread.run_sync(fn, who)
        except (redis.RedisError, OSError) as exc:
            log.warning("the sign-in throttle cannot reach Redis (%s); checking without it", exc)
            return None

    @staticmethod
    async def _refuse(send: Send, wait_s: float) -> None:
        seconds = retry_after(wait_s)
        body = json.dumps(
            {"error": f"too many failed sign-ins from this address; try again in {seconds} s"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": _TOO_MANY,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", seconds.encode()),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
