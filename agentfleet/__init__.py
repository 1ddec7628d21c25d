"""agentfleet: run fleets of parallel LLM-agent tasks on Celery and Redis.

Importing the package reads no environment and builds no Celery app: each public name is
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "Fleet": "agentfleet.orchestration.fleet",
    "Run": "agentfleet.orchestration.run",
    "Node": "agentfleet.orchestration.graph",
    "DispatchProgress": "agentfleet.orchestration.dispatch",
    "fleet_task": "agentfleet.tasks.decorator",
    "FleetTask": "agentfleet.protocol.task",
    "TaskContext": "agentfleet.tasks.context",
    "run_agent": "agentfleet.tasks.agent",
    "Tool": "agentfleet.tasks.agent",
    "AgentResult": "agentfleet.tasks.agent",
    "TaskOutcome": "agentfleet.models",
    "RunSummary": "agentfleet.models",
    "LocalCluster": "agentfleet.local",
    "Settings": "agentfleet.config",
    "RunOptions": "agentfleet.config",
    "get_settings": "agentfleet.config",
    "DeadLetterQueue": "agentfleet.orchestration.dead_letters",
    "RequeueResult": "agentfleet.orchestration.dead_letters",
    "DeadLetter": "agentfleet.dlq",
    "DLQFilter": "agentfleet.dlq",
    "DLQStats": "agentfleet.dlq",
    "CircuitBreaker": "agentfleet.ratelimit.circuit",
    "redact": "agentfleet.redaction",
    "AgentfleetError": "agentfleet.errors",
    "RetryableError": "agentfleet.errors",
    "PermanentError": "agentfleet.errors",
    "Deferred": "agentfleet.errors",
    "ClaimLost": "agentfleet.errors",
    "ConfigError": "agentfleet.errors",
    "DispatchError": "agentfleet.errors",
    "RunError": "agentfleet.errors",
    "RateLimited": "agentfleet.errors",
    "Overloaded": "agentfleet.errors",
    "DownstreamError": "agentfleet.errors",
    "TaskTimeout": "agentfleet.errors",
    "ConnectionFailed": "agentfleet.errors",
    "InvalidInput": "agentfleet.errors",
    "BadRequest": "agentfleet.errors",
    "AuthError": "agentfleet.errors",
    "SpendLimitReached": "agentfleet.errors",
    "BudgetExceeded": "agentfleet.errors",
    "LoopDetected": "agentfleet.errors",
    "ForbiddenDestination": "agentfleet.errors",
    "PoisonMessage": "agentfleet.errors",
    "UnexpectedError": "agentfleet.errors",
    "Limiter": "agentfleet.ratelimit",
    "MockMessagesServer": "agentfleet.mock_llm",
    "TaskTimeLimit": "agentfleet.errors",
    "DeadLetterNotFound": "agentfleet.errors",
    "CompensationFailed": "agentfleet.errors",
    "AggregateFailed": "agentfleet.errors",
    "MalformedMessage": "agentfleet.errors",
    "SpendLedger": "agentfleet.spend",
    "Approval": "agentfleet.approvals",
    "ApprovalStore": "agentfleet.approvals",
    "Decision": "agentfleet.approvals",
    "ApprovalError": "agentfleet.errors",
    "ApprovalNotFound": "agentfleet.errors",
    "ApprovalAlreadyDecided": "agentfleet.errors",
    "ApprovalExpired": "agentfleet.errors",
    "Parked": "agentfleet.errors",
}

# Public modules reached as attributes of the package (``agentfleet.merge.concat``).
_SUBMODULES = frozenset({"merge", "testing"})

__all__ = [
    "AgentResult",
    "AgentfleetError",
    "AggregateFailed",
    "Approval",
    "ApprovalAlreadyDecided",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalNotFound",
    "ApprovalStore",
    "AuthError",
    "BadRequest",
    "BudgetExceeded",
    "CircuitBreaker",
    "ClaimLost",
    "CompensationFailed",
    "ConfigError",
    "ConnectionFailed",
    "DLQFilter",
    "DLQStats",
    "DeadLetter",
    "DeadLetterNotFound",
    "DeadLetterQueue",
    "Decision",
    "Deferred",
    "DispatchError",
    "DispatchProgress",
    "DownstreamError",
    "Fleet",
    "FleetTask",
    "ForbiddenDestination",
    "InvalidInput",
    "Limiter",
    "LocalCluster",
    "LoopDetected",
    "MalformedMessage",
    "MockMessagesServer",
    "Node",
    "Overloaded",
    "Parked",
    "PermanentError",
    "PoisonMessage",
    "RateLimited",
    "RequeueResult",
    "RetryableError",
    "Run",
    "RunError",
    "RunOptions",
    "RunSummary",
    "Settings",
    "SpendLedger",
    "SpendLimitReached",
    "TaskContext",
    "TaskOutcome",
    "TaskTimeLimit",
    "TaskTimeout",
    "Tool",
    "UnexpectedError",
    "fleet_task",
    "get_settings",
    "merge",
    "redact",
    "run_agent",
]

if TYPE_CHECKING:
    from agentfleet import merge
    from agentfleet.approvals import Approval, ApprovalStore, Decision
    from agentfleet.config import RunOptions, Settings, get_settings
    from agentfleet.dlq import DeadLetter, DLQFilter, DLQStats
    from agentfleet.errors import (
        AgentfleetError,
        AggregateFailed,
        ApprovalAlreadyDecided,
        ApprovalError,
        ApprovalExpired,
        ApprovalNotFound,
        AuthError,
        BadRequest,
        BudgetExceeded,
        ClaimLost,
        CompensationFailed,
        ConfigError,
        ConnectionFailed,
        DeadLetterNotFound,
        Deferred,
        DispatchError,
        DownstreamError,
        ForbiddenDestination,
        InvalidInput,
        LoopDetected,
        MalformedMessage,
        Overloaded,
        Parked,
        PermanentError,
        PoisonMessage,
        RateLimited,
        RetryableError,
        RunError,
        SpendLimitReached,
        TaskTimeLimit,
        TaskTimeout,
        UnexpectedError,
    )
    from agentfleet.local import LocalCluster
    from agentfleet.mock_llm import MockMessagesServer
    from agentfleet.models import RunSummary, TaskOutcome
    from agentfleet.orchestration.dead_letters import DeadLetterQueue, RequeueResult
    from agentfleet.orchestration.dispatch import DispatchProgress
    from agentfleet.orchestration.fleet import Fleet
    from agentfleet.orchestration.graph import Node
    from agentfleet.orchestration.run import Run
    from agentfleet.protocol.task import FleetTask
    from agentfleet.ratelimit import Limiter
    from agentfleet.ratelimit.circuit import CircuitBreaker
    from agentfleet.redaction import redact
    from agentfleet.spend import SpendLedger
    from agentfleet.tasks.agent import AgentResult, Tool, run_agent
    from agentfleet.tasks.context import TaskContext
    from agentfleet.tasks.decorator import fleet_task


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"agentfleet.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'agentfleet' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, *_SUBMODULES])
