"""The mock Messages API's settings and counters, and the controls that change them.

``EndpointState`` holds the request log, the limits, the injected and scripted errors and the
latency under one lock; ``MessagesEndpoint`` (``mock_llm/endpoint.py``) answers requests
with them. Every control checks all it is given before it changes anything.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from agentfleet.errors import MockSetupInvalid
from agentfleet.mock_llm.model import MockModel
from agentfleet.mock_llm.policy import ErrorInjector, Latency, RateLimits, ScriptedReply
from agentfleet.mock_llm.request_log import RequestRecord

__all__ = ["LIMIT_OPTIONS", "EndpointState"]

LIMIT_OPTIONS = (
    "requests_per_min",
    "input_tokens_per_min",
    "output_tokens_per_min",
    "tokens_per_min",
)


class EndpointState:
    """The Messages API's state and its controls; ``MockMessagesServer`` documents the arguments."""

    def __init__(
        self,
        *,
        latency: float | str | Latency = 0.0,
        limits: Mapping[str, float | None] | None = None,
        error_rates: Mapping[int, float] | None = None,
        seed: int = 0,
        api_key: str | Collection[str] | None = None,
        models: Collection[str] | None = None,
        max_body_bytes: int = 32 * 1024 * 1024,
        stopping: threading.Event | None = None,
    ) -> None:
        unknown = set(limits or {}) - set(LIMIT_OPTIONS)
        if unknown:
            raise MockSetupInvalid(f"unknown mock server limits: {', '.join(sorted(unknown))}")
        self._limit_options: dict[str, float | None] = dict.fromkeys(LIMIT_OPTIONS)
        self._limit_options.update(limits or {})
        self._rng = random.Random(seed)
        self.latency = Latency.parse(latency)
        self._limits = self._new_limits()
        self._faults = ErrorInjector(error_rates, self._rng)
        self._keys = frozenset([api_key] if isinstance(api_key, str) else api_key or ())
        self._models = frozenset(models) if models is not None else None
        self.max_body_bytes = max_body_bytes
        self.model = MockModel(seed=seed)
        self._lock = threading.Lock()
        self._log: list[RequestRecord] = []
        self._in_flight = 0
        self._max_in_flight = 0
        self._stopping = stopping or threading.Event()

    # Control ------------------------------------------------------------------------------

    def script(self, replies: Iterable[int | Mapping[str, Any] | ScriptedReply]) -> int:
        """Queue exact replies for the next requests, in arrival order; returns how many wait.

        ``server.script([{"status": 429, "retry_after_s": 2}, 200])``: a 429 with
        ``retry-after: 2``, then a normal reply. See ``ScriptedReply`` for the fields.
        """
        with self._lock:
            return self._faults.script(replies)

    def clear_script(self) -> None:
        """Forget the scripted replies not used yet."""
        with self._lock:
            self._faults.clear_script()

    def configure(
        self,
        *,
        latency: float | str | Latency | None = None,
        error_rates: Mapping[int, float] | None = None,
        **limits: float | None,
    ) -> None:
        """Change latency, error rates or limits while serving; a changed limit starts full."""
        unknown = set(limits) - set(LIMIT_OPTIONS)
        if unknown:
            raise MockSetupInvalid(f"unknown mock server settings: {', '.join(sorted(unknown))}")
        # Everything is checked before anything changes, so a bad value changes nothing.
        new_latency = Latency.parse(latency) if latency is not None else None
        new_rates = ErrorInjector.check_rates(error_rates) if error_rates is not None else None
        options = {**self._limit_options, **limits}
        new_limits = self._new_limits(options) if limits else None
        with self._lock:
            if new_latency is not None:
                self.latency = new_latency
            if new_rates is not None:
                self._faults.error_rates = new_rates
            if new_limits is not None:
                self._limit_options = options
                self._limits = new_limits

    def reset(self) -> None:
        """Forget the request log, the script and the counters; refill the limits."""
        with self._lock:
            self._log.clear()
            self._faults.clear_script()
            self._limits = self._new_limits()
            self._max_in_flight = self._in_flight

    @property
    def requests(self) -> list[RequestRecord]:
        """The request log, in order of arrival."""
        with self._lock:
            return sorted(self._log, key=lambda r: r.arrived_at)

    def stats(self) -> dict[str, Any]:
        """Counters and settings, as ``GET /_mock/stats`` returns them."""
        with self._lock:
            by_status = Counter(str(r.status) for r in self._log)
            return {
                "requests": len(self._log),
                "by_status": dict(sorted(by_status.items())),
                "in_flight": self._in_flight,
                "max_in_flight": self._max_in_flight,
                "scripted_pending": self._faults.pending,
                "input_tokens": sum(r.input_tokens for r in self._log),
                "output_tokens": sum(r.output_tokens for r in self._log),
                "latency": self.latency.describe(),
                "error_rates": {str(k): v for k, v in self._faults.error_rates.items()},
                "limits": dict(self._limit_options),
            }

    def _new_limits(self, options: Mapping[str, float | None] | None = None) -> RateLimits:
        o = self._limit_options if options is None else options
        for name, value in o.items():
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise MockSetupInvalid(f"mock server setting {name} must be a number, got {value!r}")
        return RateLimits(
            requests_per_min=o["requests_per_min"],
            input_tokens_per_min=o["input_tokens_per_min"],
            output_tokens_per_min=o["output_tokens_per_min"],
            tokens_per_min=o["tokens_per_min"],
        )

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_mock{self._rng.getrandbits(96):024x}"
