"""How the mock Messages API misbehaves on purpose: latency, limits, injected and scripted errors.

None of these classes locks: the server holds one lock around them.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from agentfleet.errors import MockSetupInvalid

__all__ = [
    "UNLIMITED",
    "ErrorInjector",
    "Latency",
    "RateLimits",
    "ScriptedReply",
    "TokenBucket",
]

UNLIMITED = 1_000_000_000
"""The limit the rate-limit headers report on an axis that has no limit."""


@dataclass(frozen=True)
class Latency:
    """A distribution of response delays, in seconds.

    ``fixed``: always ``a``. ``uniform``: between ``a`` and ``b``. ``lognormal``: median ``a``
    and shape ``b`` (the sigma of the underlying normal). ``max_s`` caps any draw.
    """

    kind: Literal["fixed", "uniform", "lognormal"] = "fixed"
    a: float = 0.0
    b: float = 0.0
    max_s: float | None = None

    def __post_init__(self) -> None:
        if self.a < 0 or self.b < 0 or (self.max_s is not None and self.max_s < 0):
            raise MockSetupInvalid(f"mock latency must not be negative, got {self.describe()}")
        if self.kind == "uniform" and self.b < self.a:
            raise MockSetupInvalid(f"mock latency uniform:lo,hi needs lo <= hi, got {self.describe()}")

    @classmethod
    def fixed(cls, seconds: float) -> Latency:
        """Always ``seconds``."""
        return cls("fixed", seconds)

    @classmethod
    def uniform(cls, lo_s: float, hi_s: float) -> Latency:
        """Uniformly between ``lo_s`` and ``hi_s`` seconds."""
        return cls("uniform", lo_s, hi_s)

    @classmethod
    def lognormal(cls, median_s: float, sigma: float, max_s: float | None = None) -> Latency:
        """Log-normal with median ``median_s`` seconds and shape ``sigma``, capped at ``max_s``."""
        return cls("lognormal", median_s, sigma, max_s)

    @classmethod
    def parse(cls, spec: str | float | Latency) -> Latency:
        """From ``0.5``, ``"fixed:0.5"``, ``"uniform:0.2,1.5"`` or ``"lognormal:1.0,0.4[,10]"``."""
        if isinstance(spec, Latency):
            return spec
        if isinstance(spec, int | float):
            return cls.fixed(float(spec))
        kind, _, args = spec.strip().partition(":")
        if not args:
            kind, args = "fixed", kind
        try:
            values = [float(v) for v in args.split(",")]
        except ValueError:
            values = []
        shapes: dict[str, Callable[..., Latency]] = {
            "fixed": cls.fixed,
            "uniform": cls.uniform,
            "lognormal": cls.lognormal,
        }
        arity = {"fixed": (1,), "uniform": (2,), "lognormal": (2, 3)}
        if kind not in shapes or len(values) not in arity[kind]:
            raise MockSetupInvalid(
                f"mock latency {spec!r} is not understood: use seconds (0.5), fixed:S, "
                "uniform:LO,HI or lognormal:MEDIAN,SIGMA[,MAX]"
            )
        return shapes[kind](*values)

    def sample(self, rng: random.Random) -> float:
        """One delay in seconds."""
        if self.kind == "fixed":
            delay = self.a
        elif self.kind == "uniform":
            delay = rng.uniform(self.a, self.b)
        else:
            delay = self.a * math.exp(rng.gauss(0.0, self.b)) if self.a > 0 else 0.0
        return delay if self.max_s is None else min(delay, self.max_s)

    def describe(self) -> str:
        """The spec string ``parse`` reads back."""
        if self.kind == "fixed":
            return f"fixed:{self.a:g}"
        if self.kind == "uniform":
            return f"uniform:{self.a:g},{self.b:g}"
        cap = "" if self.max_s is None else f",{self.max_s:g}"
        return f"lognormal:{self.a:g},{self.b:g}{cap}"


class TokenBucket:
    """A bucket of ``capacity`` that refills completely in 60 seconds (a per-minute limit).

    Its level may go below zero when a request used more than it reserved.
    """

    def __init__(self, per_min: float, clock: Callable[[], float]) -> None:
        if per_min <= 0:
            raise MockSetupInvalid(f"mock rate limits must be positive per minute, got {per_min}")
        self.capacity = float(per_min)
        self.rate_per_s = self.capacity / 60.0
        self._clock = clock
        self._level = self.capacity
        self._updated = clock()

    def level(self) -> float:
        """Tokens available now."""
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._updated) * self.rate_per_s)
        self._updated = now
        return self._level

    def wait_s(self, amount: float) -> float:
        """Seconds until ``amount`` (capped at the capacity, so it can always fit) is available."""
        missing = min(amount, self.capacity) - self.level()
        return max(0.0, missing / self.rate_per_s)

    def take(self, amount: float) -> None:
        """Remove ``amount``; a negative amount gives tokens back."""
        self._level = min(self.capacity, self.level() - amount)

    def full_in_s(self) -> float:
        """Seconds until the bucket is full again."""
        return max(0.0, (self.capacity - self.level()) / self.rate_per_s)


_AXES = ("requests", "input-tokens", "output-tokens", "tokens")


class RateLimits:
    """Per-minute limits on requests, input tokens, output tokens and all tokens (None: none).

    Like Anthropic's, output tokens are reserved at ``max_tokens`` when a request is admitted
    and the unused part is given back when it is answered.
    """

    def __init__(
        self,
        *,
        requests_per_min: float | None = None,
        input_tokens_per_min: float | None = None,
        output_tokens_per_min: float | None = None,
        tokens_per_min: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        limits = (requests_per_min, input_tokens_per_min, output_tokens_per_min, tokens_per_min)
        self._clock = clock
        self.buckets: dict[str, TokenBucket] = {
            axis: TokenBucket(limit, clock)
            for axis, limit in zip(_AXES, limits, strict=True)
            if limit is not None
        }

    def _costs(self, input_tokens: int, output_tokens: int) -> dict[str, float]:
        return {
            "requests": 1.0,
            "input-tokens": float(input_tokens),
            "output-tokens": float(output_tokens),
            "tokens": float(input_tokens + output_tokens),
        }

    def admit(self, input_tokens: int, max_tokens: int) -> float | None:
        """Reserve a request; None when admitted, else the seconds to wait before retrying."""
        costs = self._costs(input_tokens, max_tokens)
        waits = [bucket.wait_s(costs[axis]) for axis, bucket in self.buckets.items()]
        if any(w > 0 for w in waits):
            return max(waits)
        for axis, bucket in self.buckets.items():
            bucket.take(costs[axis])
        return None

    def settle(self, max_tokens: int, output_tokens: int) -> None:
        """Give back the output tokens reserved but not used (or take the excess)."""
        unused = max_tokens - output_tokens
        for axis in ("output-tokens", "tokens"):
            if axis in self.buckets:
                self.buckets[axis].take(-unused)

    def headers(self) -> dict[str, str]:
        """The ``anthropic-ratelimit-*`` headers: limit, remaining and reset (RFC 3339, UTC)."""
        now = time.time()
        headers: dict[str, str] = {}
        for axis in _AXES:
            bucket = self.buckets.get(axis)
            if bucket is None and axis == "tokens":
                continue
            limit = UNLIMITED if bucket is None else int(bucket.capacity)
            remaining = limit if bucket is None else max(0, math.floor(bucket.level()))
            reset = now + (0.0 if bucket is None else bucket.full_in_s())
            stamp = datetime.fromtimestamp(reset, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            headers[f"anthropic-ratelimit-{axis}-limit"] = str(limit)
            headers[f"anthropic-ratelimit-{axis}-remaining"] = str(remaining)
            headers[f"anthropic-ratelimit-{axis}-reset"] = stamp
        return headers


@dataclass(frozen=True)
class ScriptedReply:
    """What the server answers to one request, whatever its limits and error rates say.

    ``status`` 200 answers normally (with ``text`` instead of the model's reply, if given);
    any other status answers that error, with ``error_type`` (default: Anthropic's type for
    the status), ``message``, ``error_code`` (sent as ``error.details.error_code``) and a
    ``retry-after`` header of ``retry_after_s`` seconds. ``delay_s`` replaces the drawn
    latency. ``in_stream``: for a streamed request, send the error as an SSE ``error`` event
    after a 200 and ``message_start``, as Anthropic does when a stream fails midway.
    """

    status: int = 200
    retry_after_s: float | None = None
    error_type: str | None = None
    message: str | None = None
    error_code: str | None = None
    delay_s: float | None = None
    text: str | None = None
    in_stream: bool = False

    def __post_init__(self) -> None:
        if self.status != 200 and not 400 <= self.status <= 599:
            raise MockSetupInvalid(f"a scripted reply's status is 200 or 4xx/5xx, got {self.status}")
        for name in ("retry_after_s", "delay_s"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise MockSetupInvalid(f"a scripted reply's {name} must not be negative, got {value}")

    @classmethod
    def of(cls, spec: int | Mapping[str, Any] | ScriptedReply) -> ScriptedReply:
        """From a status, a dict of this class's fields, or a ``ScriptedReply``."""
        if isinstance(spec, ScriptedReply):
            return spec
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls(status=spec)
        if isinstance(spec, Mapping):
            unknown = set(spec) - set(cls.__dataclass_fields__)
            if unknown:
                raise MockSetupInvalid(f"unknown scripted reply fields: {', '.join(sorted(unknown))}")
            try:
                return cls(**spec)
            except TypeError as exc:
                raise MockSetupInvalid(f"bad scripted reply {dict(spec)!r}: {exc}") from None
        raise MockSetupInvalid(f"a scripted reply is a status or an object, got {spec!r}")


class ErrorInjector:
    """Scripted replies first, in order; else a random error at the configured rates.

    ``error_rates`` maps an HTTP status to the probability (0 to 1) that a request gets it;
    the rates must add up to at most 1.
    """

    def __init__(self, error_rates: Mapping[int, float] | None, rng: random.Random) -> None:
        self.rng = rng
        self.error_rates = self.check_rates(error_rates or {})
        self._script: deque[ScriptedReply] = deque()

    @staticmethod
    def check_rates(rates: Mapping[int, float]) -> dict[int, float]:
        """``rates`` with integer statuses, or ``MockSetupInvalid`` naming what is wrong."""
        checked: dict[int, float] = {}
        for status, rate in rates.items():
            code = int(status)
            if not 400 <= code <= 599 or not 0.0 <= float(rate) <= 1.0:
                raise MockSetupInvalid(
                    f"mock error rate {status}={rate}: the status must be 4xx or 5xx and the "
                    "rate between 0 and 1"
                )
            checked[code] = float(rate)
        if sum(checked.values()) > 1.0 + 1e-9:
            raise MockSetupInvalid(f"mock error rates add up to more than 1: {checked}")
        return checked

    def script(self, replies: Iterable[int | Mapping[str, Any] | ScriptedReply]) -> int:
        """Queue replies for the next requests; returns how many are queued now."""
        self._script.extend(ScriptedReply.of(r) for r in replies)
        return len(self._script)

    def clear_script(self) -> None:
        """Forget the queued replies."""
        self._script.clear()

    @property
    def pending(self) -> int:
        """Scripted replies not used yet."""
        return len(self._script)

    def next_scripted(self) -> ScriptedReply | None:
        """The next scripted reply, removed from the queue, or None."""
        return self._script.popleft() if self._script else None

    def draw(self) -> int | None:
        """An injected error status for one request, or None."""
        if not self.error_rates:
            return None
        roll = self.rng.random()
        for status, rate in sorted(self.error_rates.items()):
            if roll < rate:
                return status
            roll -= rate
        return None
