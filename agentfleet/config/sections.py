"""The sections of the settings: one pydantic model per TOML table (``[retry]``, ``[dlq]``...).

Each section forbids unknown keys, so a misspelt setting is an error rather than ignored.
Times are in seconds, money in US dollars.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from pydantic import model_validator as _model_validator
from pydantic_settings import NoDecode

from agentfleet.config.artifacts import ArtifactSettings
from agentfleet.config.cron import cron_schedule
from agentfleet.redaction import DEFAULT_SECRET_KEYS

__all__ = [
    "AgentSettings",
    "BeatSettings",
    "BudgetSettings",
    "CommandToolSettings",
    "CredentialSpec",
    "DLQSettings",
    "DeliverySettings",
    "FetchSettings",
    "LLMSettings",
    "LimitSpec",
    "LimiterSettings",
    "ModelPrice",
    "QueueSettings",
    "RetrySettings",
    "TenantBudget",
    "WorkerSettings",
    "split_csv",
    "webhook_url",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def webhook_url(value: str | None) -> str | None:
    """``value`` when it is an http(s) URL (or unset); else the error a webhook setting gives."""
    if value is not None and not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL, e.g. a Slack incoming webhook")
    return value


def split_csv(value: Any) -> Any:
    """A list from comma-separated text (or a JSON list), for list settings set by env."""
    if isinstance(value, str):
        if value.lstrip().startswith("["):
            return json.loads(value)
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class LimitSpec(_Section):
    """Limits for one downstream (a host name, or ``provider:model`` for an LLM).

    Rates are per second or per minute as named; unset means unlimited on that axis.
    """

    rate_per_s: float | None = Field(default=None, gt=0)
    burst: int | None = Field(default=None, ge=1)
    max_concurrency: int | None = Field(default=None, ge=1)
    requests_per_min: float | None = Field(default=None, gt=0)
    input_tokens_per_min: float | None = Field(default=None, gt=0)
    output_tokens_per_min: float | None = Field(default=None, gt=0)


class LimiterSettings(_Section):
    """How the cluster-wide limiter waits and leases (seconds).

    ``pause_without_retry_after_s`` is how long a 429 or 529 that names no wait pauses its
    downstream for every worker. A pause with more than ``pause_notice_s`` left is shown in
    the progress display, ``agentfleet runs show`` and ``/health``.
    """

    default: LimitSpec = LimitSpec()
    max_parallelism: int | None = Field(default=None, ge=1)
    short_wait_s: float = Field(default=1.0, ge=0)
    lease_ttl_s: float = Field(default=30.0, gt=0)
    pause_without_retry_after_s: float = Field(default=1.0, ge=0)
    pause_notice_s: float = Field(default=5.0, ge=0)


class RetrySettings(_Section):
    """Exponential backoff with full jitter: a wait drawn from [0, min(cap, base * 2**n)]."""

    max_retries: int = Field(default=3, ge=0)
    backoff_base_s: float = Field(default=1.0, gt=0)
    backoff_cap_s: float = Field(default=300.0, gt=0)
    unknown_is_retryable: bool = True


class DeliverySettings(_Section):
    """How every dispatched item is brought to exactly one outcome (seconds).

    A running item holds a claim that its worker renews every third of ``claim_ttl_s``; a
    dead worker's claim lapses after at most ``claim_ttl_s``. Every ``reconcile_interval_s``
    one worker (a Redis lock picks it) looks for items of running runs with no outcome, no
    live claim and no message waiting; one still in that state ``reconcile_grace_s`` later is
    published again. A pass reads at most ``reconcile_max_scan`` waiting messages; beyond
    that, recovery waits until the queues are shorter. ``redis_retry_s`` is how long a
    worker's own bookkeeping retries a Redis that does not answer before it hands the message
    back; ``client_outage_s`` is how long ``Run`` and ``Fleet`` calls ride out a broker outage
    before they raise; ``pool_timeout_s`` is how long a command waits for a free connection.

    Every Redis connection (agentfleet's own, the broker's, the result backend's) gives up on a
    reply after ``redis_timeout_s`` (above the 1 s the blocking reads wait) and on connecting
    after ``redis_connect_timeout_s``, so a link that drops packets silently fails a call
    within those bounds instead of hanging it. A connection idle for ``redis_health_check_s``
    is checked (TCP keepalive probes every ``redis_health_check_s``, two unanswered close it;
    a PING before its next use; the broker's pending ``BRPOP`` is dropped once its reply is
    that much overdue).
    """

    claim_ttl_s: float = Field(default=20.0, ge=1)
    reconcile_interval_s: float = Field(default=5.0, gt=0)
    reconcile_grace_s: float = Field(default=10.0, ge=0)
    reconcile_max_scan: int = Field(default=200_000, ge=1000)
    redis_retry_s: float = Field(default=30.0, ge=0)
    client_outage_s: float = Field(default=60.0, ge=0)
    pool_timeout_s: float = Field(default=20.0, gt=0)
    redis_timeout_s: float = Field(default=5.0, ge=2)
    redis_connect_timeout_s: float = Field(default=3.0, gt=0)
    redis_health_check_s: int = Field(default=5, ge=1)


class WorkerSettings(_Section):
    """Defaults for ``agentfleet worker`` and ``LocalCluster``.

    ``autoscale`` is ``max,min`` pool sizes (prefork and gevent pools); an autoscaled pool
    shrinks after ``autoscale_keepalive_s`` seconds without new work. Every worker writes a
    heartbeat (its tasks and queues) every ``heartbeat_s`` seconds; a worker silent for three
    of them counts as gone.
    """

    pool: Literal["prefork", "threads", "gevent", "solo"] = "threads"
    concurrency: int = Field(default=8, ge=1)
    autoscale: str | None = None
    autoscale_keepalive_s: float = Field(default=30.0, gt=0)
    max_tasks_per_child: int | None = Field(default=None, ge=1)
    heartbeat_s: float = Field(default=5.0, ge=0.5)

    @property
    def heartbeat_ttl_s(self) -> float:
        """Seconds after its last heartbeat that a worker counts as gone."""
        return self.heartbeat_s * 3

    @property
    def max_slots(self) -> int:
        """The largest pool these settings give a worker: the autoscale maximum, else concurrency."""
        if self.autoscale:
            return int(self.autoscale.split(",")[0])
        return self.concurrency

    @field_validator("autoscale")
    @classmethod
    def _autoscale_shape(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = value.split(",")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ValueError("must be 'max,min', for example '32,4'")
        high, low = (int(p) for p in parts)
        if high < low or high < 1:
            raise ValueError("max must be at least min and at least 1, for example '32,4'")
        return f"{high},{low}"


class QueueSettings(_Section):
    """Queue names: agent work, fan-in callbacks and maintenance are kept apart."""

    agents: str = "agentfleet.agents"
    fanin: str = "agentfleet.fanin"
    maintenance: str = "agentfleet.maintenance"


class DLQSettings(ArtifactSettings):
    """Dead letters, poison caps, circuit breakers, the digest, artifacts. Times are in seconds.

    ``max_deliveries``: deliveries of one task id whose worker process died before it is poison.
    ``vendor_issue_failures`` failed attempts against one downstream within
    ``vendor_issue_window_s``, at least ``circuit_failure_ratio`` of its attempts in that window,
    flag a vendor issue and open its circuit for ``circuit_cooldown_s``; then one probe may run
    (it holds the half-open circuit for at most ``circuit_probe_ttl_s``). The digest runs on
    ``digest_cron`` (UTC) and POSTs to ``webhook_url`` when the depth exceeds
    ``digest_threshold``, trying ``webhook_attempts`` times with ``webhook_timeout_s`` each.
    ``redact_keys`` name input keys whose values never reach a dead letter. A malformed queue entry (one
    no worker can decode or deliver) is kept as a dead letter of at most ``malformed_keep_bytes`` bytes
    of text while fewer than ``malformed_max_entries`` wait; past that it is dropped and counted.
    """

    max_deliveries: int = Field(default=3, ge=1)
    vendor_issue_failures: int = Field(default=5, ge=1)
    vendor_issue_window_s: float = Field(default=300.0, gt=0)
    circuit_failure_ratio: float = Field(default=0.5, gt=0, le=1)
    circuit_cooldown_s: float = Field(default=30.0, gt=0)
    circuit_probe_ttl_s: float = Field(default=60.0, gt=0)
    digest_cron: str = "0 8 * * *"
    digest_threshold: int = Field(default=5, ge=0)
    webhook_url: str | None = None
    webhook_attempts: int = Field(default=3, ge=1)
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    redact_keys: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list(DEFAULT_SECRET_KEYS))
    malformed_keep_bytes: int = Field(default=4096, ge=256)
    malformed_max_entries: int = Field(default=10_000, ge=0)

    @field_validator("redact_keys", mode="before")
    @classmethod
    def _keys_csv(cls, value: Any) -> Any:
        return split_csv(value)

    @field_validator("digest_cron")
    @classmethod
    def _cron_shape(cls, value: str) -> str:
        cron_schedule(value)
        return " ".join(value.split())

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return webhook_url(value)


class ModelPrice(_Section):
    """US dollars per million tokens."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)
    cache_write_per_mtok: float = Field(default=0.0, ge=0)
    cache_read_per_mtok: float = Field(default=0.0, ge=0)


def _default_prices() -> dict[str, ModelPrice]:
    def price(inp: float, out: float) -> ModelPrice:
        return ModelPrice(
            input_per_mtok=inp,
            output_per_mtok=out,
            cache_write_per_mtok=inp * 1.25,
            cache_read_per_mtok=inp * 0.1,
        )

    return {
        "claude-haiku-4-5": price(1.0, 5.0),
        "claude-sonnet-4-5": price(3.0, 15.0),
        "claude-sonnet-4-6": price(3.0, 15.0),
        "claude-opus-4-5": price(5.0, 25.0),
        "claude-opus-4-6": price(5.0, 25.0),
        "claude-3-5-haiku-latest": price(0.8, 4.0),
    }


def _default_context_windows() -> dict[str, int]:
    return dict.fromkeys(_default_prices(), 200_000)


class LLMSettings(_Section):
    """The LLM clients. ``base_url``: the Messages API ``ctx.anthropic`` calls (with no
    ``api_key`` nor ``ANTHROPIC_API_KEY``, it must be set: the mock, say). ``openai_base_url``:
    an OpenAI-compatible server whose chat completions are limited, accounted and priced like
    ``api.openai.com``'s (``openai:<model>``). ``context_windows``: input tokens each model
    takes; a request estimated larger fails at once, unsent (a model not listed is not
    checked)."""

    base_url: str | None = None
    openai_base_url: str | None = None
    api_key: SecretStr | None = None
    default_model: str = "claude-haiku-4-5"
    timeout_s: float = Field(default=60.0, gt=0)
    connect_timeout_s: float = Field(default=5.0, gt=0)
    prices: dict[str, ModelPrice] = Field(default_factory=_default_prices)
    context_windows: dict[str, Annotated[int, Field(ge=1)]] = Field(default_factory=_default_context_windows)

    @field_validator("api_key", "base_url", "openai_base_url", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # docker compose passes an unset ${VAR:-} as an empty string.
        return None if value == "" else value


class FetchSettings(_Section):
    """The ``http_fetch`` tool and the SSRF guard. ``keepalive_s``: seconds an idle connection
    of a worker process's shared pools is kept for the next task."""

    allow_private_hosts: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=20.0, gt=0)
    max_bytes: int = Field(default=5_000_000, ge=1)
    max_redirects: int = Field(default=5, ge=0)
    keepalive_s: float = Field(default=30.0, gt=0)


class TenantBudget(_Section):
    """One tenant's own caps: US dollars a day (UTC)."""

    daily_usd: float | None = Field(default=None, gt=0)


class BudgetSettings(_Section):
    """Spending caps. Unset means no cap. Dollars are US dollars, times seconds.

    ``task_*`` cap one item (one stage of a pipeline, one step of a graph) over every attempt
    it makes: dollars, tokens (input plus output), model calls (turns) and seconds executing.
    ``run_usd`` caps a run (``Fleet.map(budget_usd=...)`` overrides it per run);
    ``tenant_daily_usd`` caps each tenant's runs per UTC day (``tenants.NAME.daily_usd`` per
    tenant); ``fleet_daily_usd`` caps the whole fleet per UTC day. Each of those three alerts
    once when its spend reaches ``alert_at`` of the cap (a log line, a metric and a POST to
    ``webhook_url``, else ``dlq.webhook_url``) and stops every call at the cap.
    ``ledger_days`` is how many days the spend ledger keeps each day's spend by downstream.
    """

    run_usd: float | None = Field(default=None, gt=0)
    task_usd: float | None = Field(default=None, gt=0)
    task_tokens: int | None = Field(default=None, ge=1)
    task_turns: int | None = Field(default=None, ge=1)
    task_wall_s: float | None = Field(default=None, gt=0)
    tenant_daily_usd: float | None = Field(default=None, gt=0)
    tenants: dict[str, TenantBudget] = Field(default_factory=dict)
    fleet_daily_usd: float | None = Field(default=None, gt=0)
    alert_at: float = Field(default=0.8, gt=0, le=1)
    webhook_url: str | None = None
    ledger_days: int = Field(default=35, ge=1)

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return webhook_url(value)

    def tenant_cap(self, tenant: str | None) -> float | None:
        """US dollars ``tenant`` may spend per UTC day: its own cap, else ``tenant_daily_usd``."""
        if not tenant:
            return None
        own = self.tenants.get(tenant)
        if own is not None and own.daily_usd is not None:
            return own.daily_usd
        return self.tenant_daily_usd


class CredentialSpec(_Section):
    """A named credential: where its value comes from, and the domains it may be sent to."""

    env: str | None = None
    file: str | None = None
    domains: list[str] = Field(default_factory=list)

    @_model_validator(mode="after")
    def _one_source(self) -> CredentialSpec:
        if (self.env is None) == (self.file is None):
            raise ValueError("set exactly one of env (a variable name) or file (a path)")
        if not self.domains:
            raise ValueError("list the domains this credential may be sent to")
        return self


class AgentSettings(_Section):
    """The agent loop: model calls per task, the loop detector, tools run at once.

    ``checkpoint``: the conversation is stored after every model turn and every tool result,
    so a retried, redelivered, deferred or requeued agent resumes where it was. ``tool_wait_s``
    is how long (seconds, over every deferral) a tool call may wait for a rate-limited
    downstream (a limiter deferral or a 429's retry-after) before the model is told it failed.
    With checkpoints the item is rescheduled for each wait and frees its worker slot; without
    them the tool waits in its slot, since a reschedule would start the conversation over.
    """

    max_turns: int = Field(default=10, ge=1)
    loop_limit: int = Field(default=5, ge=2)
    max_parallel_tools: int = Field(default=8, ge=1)
    tool_wait_s: float = Field(default=30.0, ge=0)
    checkpoint: bool = True


class CommandToolSettings(_Section):
    """The ``run_command`` tool: off unless enabled, and only for allowlisted executables."""

    enabled: bool = False
    allow: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=60.0, gt=0)
    max_output_bytes: int = Field(default=200_000, ge=1)


class BeatSettings(_Section):
    """celery beat with the Redis scheduler (celery-redbeat) and its single-beat lock.

    Beat wakes at least every ``max_loop_interval_s`` seconds. The beat that holds the lock
    renews it on each wake for ``lock_timeout_s`` seconds; a second beat waits, retrying every
    ``max_loop_interval_s``, and takes over at most ``lock_timeout_s`` after the first one dies.
    A scheduled dispatch that no maintenance worker takes within ``dispatch_expires_s``
    seconds is dropped rather than run late (an interval schedule's expires after its
    interval when that is shorter, but not before a minute).
    """

    max_loop_interval_s: float = Field(default=5.0, gt=0)
    lock_timeout_s: int = Field(default=30, ge=2)
    dispatch_expires_s: float = Field(default=3600.0, ge=60)

    @_model_validator(mode="after")
    def _lock_outlives_a_loop(self) -> BeatSettings:
        if self.lock_timeout_s < 2 * self.max_loop_interval_s:
            raise ValueError(
                f"lock_timeout_s ({self.lock_timeout_s}) must be at least twice max_loop_interval_s "
                f"({self.max_loop_interval_s}), or the lock can expire between two renewals and a "
                "second beat would start sending too. Raise AGENTFLEET_BEAT__LOCK_TIMEOUT_S."
            )
        return self
