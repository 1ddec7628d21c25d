"""What the egress proxy answers a sandboxed program when it does not relay a response.

Every refusal and failure is an ordinary HTTP response with a ``text/plain`` body of one line
that names the destination and, for a refusal, the setting that would change the answer, and
the header ``X-Agentfleet-Egress`` (``refused`` or ``failed``), so a program or a person reading
its log sees why at once. A destination refusal also says so in its status line, which is all
many clients show of a refused ``CONNECT``. No message holds a credential's value: the vault and the guard
never put one in their errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from http import HTTPStatus

import httpx

from agentfleet.errors import (
    AgentfleetError,
    BudgetExceeded,
    ClaimLost,
    ConfigError,
    Deferred,
    ForbiddenDestination,
    RateLimited,
    TaskTimeout,
)

__all__ = ["Reply", "reply_for"]


@dataclass(frozen=True)
class Reply:
    """A response the proxy makes itself: ``status``, one line of text, extra headers."""

    status: int
    text: str
    kind: str = "refused"
    extra: tuple[tuple[str, str], ...] = ()
    reason: str | None = None  # the status line's phrase (the standard one when None)

    def phrase(self) -> bytes:
        text = self.reason or HTTPStatus(self.status).phrase
        return "".join(ch if " " <= ch <= "~" else "?" for ch in text).encode("ascii")

    def headers(self) -> list[tuple[str, str]]:
        body = self.body()
        return [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("X-Agentfleet-Egress", self.kind),
            ("Connection", "close"),
            *self.extra,
        ]

    def body(self) -> bytes:
        return f"agentfleet egress proxy: {self.text}\n".encode()


def reply_for(exc: BaseException, destination: str) -> Reply:
    """The reply for a request to ``destination`` that raised ``exc`` in the fleet transport."""
    if isinstance(exc, Deferred | RateLimited):
        wait_s = exc.wait_s if isinstance(exc, Deferred) else (exc.retry_after_s or 1.0)
        seconds = str(max(1, math.ceil(wait_s)))
        text = f"{destination} is rate limited by the fleet's limits; retry after {seconds} s"
        return Reply(429, text, "failed", (("Retry-After", seconds),))
    if isinstance(exc, ForbiddenDestination | BudgetExceeded | ClaimLost):
        return Reply(403, f"refused {destination}: {_message(exc)}")
    if isinstance(exc, TaskTimeout | httpx.TimeoutException):
        return Reply(504, f"{destination} did not answer in time ({_message(exc)})", "failed")
    if isinstance(exc, ConfigError):
        return Reply(502, f"cannot send to {destination}: {_message(exc)}", "failed")
    if isinstance(exc, AgentfleetError | httpx.HTTPError):
        return Reply(502, f"cannot reach {destination}: {_message(exc)}", "failed")
    return Reply(502, f"cannot reach {destination}: {type(exc).__name__}", "failed")


def _message(exc: BaseException) -> str:
    text = exc.message if isinstance(exc, AgentfleetError) else str(exc)
    return " ".join((text or type(exc).__name__).split())
