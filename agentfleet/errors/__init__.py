"""The one exception tree of agentfleet (``errors/mapping.py`` maps foreign errors into it).

::

    AgentfleetError
    ├── ConfigError             a setting is wrong; the message names it and the fix
    ├── DispatchError           a fan-out could not be sent (inputs not JSON, unknown task)
    ├── RunError                a run's outcome cannot be given (aggregate failed, run cancelled)
    ├── DeadLetterNotFound      no dead letter has that id (requeued or purged already?)
    ├── BrokerUnavailable       Redis did not answer for longer than the outage allowed
    ├── MockServerError         the mock Messages API's own errors (``agentfleet.mock_llm``)
    │   ├── MockRequestInvalid  a request the real API would refuse: the mock answers it 400
    │   └── MockSetupInvalid    a mock server option, setting or scripted reply is wrong
    ├── Deferred                not a failure: run again after ``wait_s`` (limits, open circuit)
    ├── ClaimLost               not a failure: this execution no longer holds its item's claim
    ├── Parked                  not a failure: the item waits for a decision, holding no slot
    ├── ApprovalError           deciding a pause went wrong: ``ApprovalNotFound``,
    │                           ``ApprovalAlreadyDecided`` (the first decision stands),
    │                           ``ApprovalExpired`` (the timeout decided first)
    ├── RetryableError          a later attempt may succeed
    │   ├── RateLimited         429 from a downstream, or a limiter said no (``retry_after_s``)
    │   ├── Overloaded          529 from an LLM provider
    │   ├── DownstreamError     5xx, 408 or 409 from a downstream
    │   ├── TaskTimeout         a request to a downstream timed out
    │   │   └── TaskTimeLimit   the task's own soft or hard time limit ran out
    │   ├── ConnectionFailed    could not connect, or the connection broke
    │   └── UnexpectedError     an exception the classifier does not know (retried by default)
    └── PermanentError          retrying cannot help; goes straight to the dead-letter queue
        ├── InvalidInput        the task input failed validation
        ├── BadRequest          400, 404, 413 or 422 from a downstream
        │   └── ContextWindowExceeded  an LLM request larger than its model's context window
        ├── AuthError           401 or 403 from a downstream
        ├── SpendLimitReached   a 429 whose error says the account's spend limit is reached
        ├── BudgetExceeded      the task crossed its wall-clock, token or dollar budget
        ├── LoopDetected        an agent repeated the same tool call too often
        ├── ForbiddenDestination the SSRF guard or a credential's domain list refused a request
        ├── PoisonMessage       the task killed its worker too many times
        ├── CompensationFailed  a succeeded item's compensation failed for good
        ├── AggregateFailed     a run's aggregate raised, exited, returned what cannot be
                                stored, kept killing its worker, or is not allowed there
        └── MalformedMessage    a queue entry that cannot be decoded or delivered as a task

Every error carries a short machine ``category`` (``"rate_limited"``, ``"bad_request"``...) used
by the dead-letter queue, and optionally the HTTP ``status_code`` and the ``downstream`` it came
from. ``downstream_fault`` marks the classes that say a downstream is unhealthy (5xx, 529,
timeouts, broken connections): only those count towards its circuit breaker.
"""

from __future__ import annotations

from typing import Any, ClassVar

from agentfleet.responses import parse_retry_after, retry_after_from_headers

__all__ = [
    "AgentfleetError",
    "AggregateFailed",
    "ApprovalAlreadyDecided",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalNotFound",
    "AuthError",
    "BadRequest",
    "BrokerUnavailable",
    "BudgetExceeded",
    "ClaimLost",
    "CompensationFailed",
    "ConfigError",
    "ConnectionFailed",
    "ContextWindowExceeded",
    "DeadLetterNotFound",
    "Deferred",
    "DispatchError",
    "DownstreamError",
    "ForbiddenDestination",
    "InvalidInput",
    "LoopDetected",
    "MalformedMessage",
    "MockRequestInvalid",
    "MockServerError",
    "MockSetupInvalid",
    "Overloaded",
    "Parked",
    "PermanentError",
    "PoisonMessage",
    "RateLimited",
    "RetryableError",
    "RunError",
    "SpendLimitReached",
    "TaskTimeLimit",
    "TaskTimeout",
    "UnexpectedError",
    "classify",
    "error_for_status",
    "fleet_error_in_chain",
    "parse_retry_after",
    "retry_after_from_headers",
]


class AgentfleetError(Exception):
    """Base of every error agentfleet raises.

    ``status_code`` is the HTTP status that caused it, if any; ``downstream`` the host name or
    ``provider:model`` it came from, if known.
    """

    category: ClassVar[str] = "error"
    downstream_fault: ClassVar[bool] = False

    def __init__(
        self,
        message: str = "",
        *,
        status_code: int | None = None,
        downstream: str | None = None,
    ) -> None:
        super().__init__(message or self.category.replace("_", " "))
        self.message = message or self.category.replace("_", " ")
        self.status_code = status_code
        self.downstream = downstream
        # Set by whoever already told the downstream's circuit breaker about this error (the
        # fleet transport does, per request), so the task's final accounting does not count it twice.
        self.circuit_recorded = False

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructors do not pickle by default; Celery's pools may pickle errors.
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))


def _rebuild(cls: type[AgentfleetError], message: str, state: dict[str, Any]) -> AgentfleetError:
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(state)
    return err


class ConfigError(AgentfleetError):
    """A setting has a bad value. The message names the setting and how to fix it."""

    category = "config"


class DispatchError(AgentfleetError):
    """A fan-out could not be sent: an input is not JSON, or the task is unknown."""

    category = "dispatch"


class RunError(AgentfleetError):
    """A run's result cannot be given: its aggregate failed, or it was cancelled."""

    category = "run"


class DeadLetterNotFound(AgentfleetError):
    """No dead letter has the id asked for: it may have been requeued or purged already."""

    category = "not_found"


class BrokerUnavailable(AgentfleetError):
    """Redis (broker and state) did not answer for longer than the outage a call rides out.

    The message names the broker with its password masked. Nothing was lost: a run goes on
    in the workers, and its handle can be asked again once Redis is back.
    """

    category = "broker_unavailable"


class MockServerError(AgentfleetError):
    """Raised by the mock Messages API, never by the fleet's clients: the mock is a server, so
    its errors describe what it was asked, not what a downstream answered."""

    category = "mock"


class MockRequestInvalid(MockServerError):
    """A request the real API would refuse with 400 ``invalid_request_error``; the mock does too."""


class MockSetupInvalid(MockServerError):
    """A mock server option, runtime setting or scripted reply is wrong; the message says which."""


class Deferred(AgentfleetError):
    """Not a failure: the task should run again after ``wait_s`` seconds.

    Raised when a rate-limit token or a concurrency slot is not free soon, or a downstream's
    circuit is open. Deferring never consumes a retry.
    """

    category = "deferred"

    def __init__(self, wait_s: float, reason: str = "", *, downstream: str | None = None) -> None:
        super().__init__(reason or f"deferred for {wait_s:.2f} s", downstream=downstream)
        self.wait_s = max(0.0, float(wait_s))
        self.reason = reason


class ClaimLost(AgentfleetError):
    """This execution no longer holds its item's claim: it lapsed (the worker was cut off from
    Redis, or frozen, for longer than ``delivery.claim_ttl_s``) or another delivery holds it.

    Not a failure, and never retried or dead-lettered: another delivery may be running the
    item, so this one stops. The fleet's own calls (``ctx.step``, model and HTTP requests
    through the fleet transport, agent tool calls, checkpoints) raise it once the claim is
    gone; ``ctx.check_claim()`` raises it on demand. The delivery then hands the item back:
    its message comes back later and returns the outcome the item ends with.
    """

    category = "claim_lost"


class Parked(AgentfleetError):
    """Not a failure: the body reached ``ctx.approval`` / ``ctx.wait_for_event`` with no decision
    yet; the item is parked (``tasks/features/approval.py``). ``approval``: the pause to record,
    expiring in ``timeout_s`` s (None when it is recorded already)."""

    category = "parked"

    def __init__(self, approval_id: str, approval: Any = None, *, timeout_s: float | None = None) -> None:
        super().__init__(f"waiting for a decision on {approval_id}")
        self.approval_id, self.approval, self.timeout_s = approval_id, approval, timeout_s


class ApprovalError(AgentfleetError):
    """Deciding a pause went wrong. ``approval``: the approval as it stands, when there is one."""

    category = "approval"

    def __init__(self, message: str, approval: Any = None) -> None:
        super().__init__(message)
        self.approval = approval


class ApprovalNotFound(ApprovalError):
    """No approval has that id (never made, or decided long ago and expired)."""

    category = "approval_not_found"


class ApprovalAlreadyDecided(ApprovalError):
    """Decided before: the first decision stands (``approval``; the service answers 409)."""

    category = "approval_decided"


class ApprovalExpired(ApprovalError):
    """Its timeout passed first: the timeout decided, and that stands (``approval``)."""

    category = "approval_expired"


class RetryableError(AgentfleetError):
    """A later attempt may succeed. ``retry_after_s`` is the downstream's own hint, if any."""

    category = "retryable"

    def __init__(
        self,
        message: str = "",
        *,
        retry_after_s: float | None = None,
        status_code: int | None = None,
        downstream: str | None = None,
    ) -> None:
        super().__init__(message, status_code=status_code, downstream=downstream)
        self.retry_after_s = retry_after_s


class RateLimited(RetryableError):
    """429 from a downstream, or a cluster-wide limiter refused; wait ``retry_after_s``."""

    category = "rate_limited"


class Overloaded(RetryableError):
    """529: the LLM provider is overloaded."""

    category = "overloaded"
    downstream_fault = True


class DownstreamError(RetryableError):
    """A 5xx, 408 or 409 from a downstream."""

    category = "downstream_error"
    downstream_fault = True


class TaskTimeout(RetryableError):
    """A request to a downstream timed out."""

    category = "timeout"
    downstream_fault = True


class TaskTimeLimit(TaskTimeout):
    """The task's own soft time limit ran out (or its hard limit killed the worker process).

    Retryable like any timeout, but it says nothing about a downstream's health: an agent can
    be slow on its own, so it never counts towards a circuit breaker.
    """

    category = "time_limit"
    downstream_fault = False


class ConnectionFailed(RetryableError):
    """Could not connect to a downstream, or the connection broke mid-request."""

    category = "connection"
    downstream_fault = True


class UnexpectedError(RetryableError):
    """An exception of a type agentfleet does not know; retried unless the task says otherwise."""

    category = "unexpected"


class PermanentError(AgentfleetError):
    """Retrying cannot help: the task is dead-lettered at once."""

    category = "permanent"


class InvalidInput(PermanentError):
    """The task's input failed validation against the function's type hints."""

    category = "invalid_input"


class BadRequest(PermanentError):
    """400, 404, 413, 422 or another 4xx from a downstream: the request itself is wrong."""

    category = "bad_request"


class ContextWindowExceeded(BadRequest):
    """An LLM request whose estimated input is larger than its model's context window: refused
    before it is sent (it could only fail, after waiting for limits and tokens)."""

    category = "context_window"


class AuthError(PermanentError):
    """401 or 403 from a downstream."""

    category = "auth"


class SpendLimitReached(PermanentError):
    """A 429 whose error says the account's spend limit is reached: waiting will not help."""

    category = "spend_limit"


class BudgetExceeded(PermanentError):
    """The task crossed its wall-clock, token or dollar budget."""

    category = "budget_exceeded"


class LoopDetected(PermanentError):
    """An agent made the same tool call with the same input too many times in a row."""

    category = "loop_detected"


class ForbiddenDestination(PermanentError):
    """The SSRF guard, or a credential's allowed domains, refused a request."""

    category = "forbidden_destination"


class PoisonMessage(PermanentError):
    """The task's worker process died on it more than ``max_deliveries`` times."""

    category = "poison"


class CompensationFailed(PermanentError):
    """A succeeded item's compensating function failed and its retries ran out; the message
    names the error it raised. Dead-lettered in its own category."""

    category = "compensation"


class AggregateFailed(PermanentError):
    """A run's aggregate ended without a value: it raised (``SystemExit`` included), returned
    what JSON cannot hold, killed its worker too often, or names a function its worker may not
    run. Recorded once for the run and dead-lettered in its own category."""

    category = "aggregate"


class MalformedMessage(PermanentError):
    """A queue entry a worker could not decode or deliver as a task (not JSON, not kombu's
    envelope, a body that does not decode, a content type refused, a task no worker has). It is
    taken out of its queue and dead-lettered in its own category; it cannot be requeued."""

    category = "malformed"


# The classifier builds on the tree above, so it comes after it (and is re-exported here).
from agentfleet.errors.mapping import classify, error_for_status, fleet_error_in_chain  # noqa: E402
