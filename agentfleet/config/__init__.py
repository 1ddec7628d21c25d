"""Settings: environment (prefix ``AGENTFLEET_``, nested with ``__``) over ``agentfleet.toml``.

The TOML file is the one named by ``AGENTFLEET_CONFIG``, else ``./agentfleet.toml`` if it exists.
Environment variables win over the file. ``get_settings()`` is cached; importing this module
reads nothing.

Every bad value raises ``ConfigError`` with one message that names the setting (as an
environment variable and as a TOML key) and says how to fix it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic import model_validator as _model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from agentfleet.config.dispatch import DispatchSettings
from agentfleet.config.egress import EgressSettings
from agentfleet.config.fanouts import FanoutSpec, ScheduleSpec
from agentfleet.config.options import RunOptionArgs, RunOptions, run_options
from agentfleet.config.redis_url import check_redis_url, url_password, with_password
from agentfleet.config.sandbox import SandboxLimits, SandboxSettings
from agentfleet.config.sections import (
    AgentSettings,
    BeatSettings,
    BudgetSettings,
    CommandToolSettings,
    CredentialSpec,
    DeliverySettings,
    DLQSettings,
    FetchSettings,
    LimiterSettings,
    LimitSpec,
    LLMSettings,
    ModelPrice,
    QueueSettings,
    RetrySettings,
    TenantBudget,
    WorkerSettings,
    split_csv,
)
from agentfleet.config.surfaces import ApprovalSettings, FlowerSettings, ServiceSettings
from agentfleet.errors import ConfigError
from agentfleet.redaction import Redactor
from agentfleet.redis_client import RedisTarget, mask_url

__all__ = [
    "AgentSettings",
    "ApprovalSettings",
    "BeatSettings",
    "BudgetSettings",
    "CommandToolSettings",
    "CredentialSpec",
    "DLQSettings",
    "DeliverySettings",
    "DispatchSettings",
    "EgressSettings",
    "FanoutSpec",
    "FetchSettings",
    "FlowerSettings",
    "LLMSettings",
    "LimitSpec",
    "LimiterSettings",
    "ModelPrice",
    "QueueSettings",
    "RetrySettings",
    "RunOptionArgs",
    "RunOptions",
    "SandboxLimits",
    "SandboxSettings",
    "ScheduleSpec",
    "ServiceSettings",
    "Settings",
    "TenantBudget",
    "WorkerSettings",
    "config_path",
    "get_settings",
    "load_settings",
    "reset_settings",
    "run_options",
]

ENV_PREFIX = "AGENTFLEET_"
CONFIG_ENV = "AGENTFLEET_CONFIG"


class Settings(BaseSettings):
    """All of agentfleet's settings. Times are in seconds, money in US dollars."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    broker_url: str = "redis://127.0.0.1:6379/0"
    result_backend: str | None = None
    state_url: str | None = None
    redis_password: SecretStr | None = None
    sentinel_master: str | None = None
    sentinel_password: SecretStr | None = None
    key_prefix: str = "af"
    visibility_timeout_s: int = Field(default=3600, ge=10)
    unacked_restore_interval_s: int = Field(default=10, ge=1)
    broker_max_connections: int = Field(default=2000, ge=10)
    task_time_limit_s: int = Field(default=900, ge=1)
    task_soft_time_limit_s: int = Field(default=840, ge=1)
    result_ttl_s: int = Field(default=7 * 86400, ge=60)
    celery_result_expires_s: int = Field(default=86400, ge=60)
    task_modules: Annotated[list[str], NoDecode] = Field(default_factory=list)
    workdir_root: str | None = None
    fail_fast: bool = False
    log_json: bool = False

    worker: WorkerSettings = WorkerSettings()
    delivery: DeliverySettings = DeliverySettings()
    dispatch: DispatchSettings = DispatchSettings()
    queues: QueueSettings = QueueSettings()
    retry: RetrySettings = RetrySettings()
    limiter: LimiterSettings = LimiterSettings()
    limits: dict[str, LimitSpec] = Field(default_factory=dict)
    dlq: DLQSettings = DLQSettings()
    llm: LLMSettings = LLMSettings()
    fetch: FetchSettings = FetchSettings()
    egress: EgressSettings = EgressSettings()
    budgets: BudgetSettings = BudgetSettings()
    agent: AgentSettings = AgentSettings()
    credentials: dict[str, CredentialSpec] = Field(default_factory=dict)
    command: CommandToolSettings = CommandToolSettings()
    sandbox: SandboxSettings = SandboxSettings()
    fanouts: dict[str, FanoutSpec] = Field(default_factory=dict)
    schedules: dict[str, ScheduleSpec] = Field(default_factory=dict)
    beat: BeatSettings = BeatSettings()
    service: ServiceSettings = ServiceSettings()
    flower: FlowerSettings = FlowerSettings()
    approvals: ApprovalSettings = ApprovalSettings()

    @field_validator("task_modules", mode="before")
    @classmethod
    def _modules_csv(cls, value: Any) -> Any:
        return split_csv(value)

    @field_validator("broker_url", "result_backend")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_redis_url(value)
        return value

    @field_validator("state_url")
    @classmethod
    def _state_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_redis_url(value, cluster=True)
        return value

    @field_validator("redis_password", mode="before")
    @classmethod
    def _empty_password_is_unset(cls, value: Any) -> Any:
        # docker compose passes an unset ${VAR:-} as an empty string.
        return None if value == "" else value

    @_model_validator(mode="after")
    def _password_apart(self) -> Settings:
        if self.redis_password is not None:
            password = self.redis_password.get_secret_value()
            self.broker_url = with_password(self.broker_url, password)
            if self.result_backend is not None:
                self.result_backend = with_password(self.result_backend, password)
            if self.state_url is not None:
                self.state_url = with_password(self.state_url, password)
        return self

    @_model_validator(mode="after")
    def _time_limits_fit(self) -> Settings:
        if self.task_time_limit_s >= self.visibility_timeout_s:
            raise ValueError(
                f"task_time_limit_s ({self.task_time_limit_s}) must be below "
                f"visibility_timeout_s ({self.visibility_timeout_s}): Redis redelivers a task "
                "still running after the visibility timeout, so it would run twice. "
                "Raise AGENTFLEET_VISIBILITY_TIMEOUT_S or lower AGENTFLEET_TASK_TIME_LIMIT_S."
            )
        if self.task_soft_time_limit_s >= self.task_time_limit_s:
            raise ValueError(
                f"task_soft_time_limit_s ({self.task_soft_time_limit_s}) must be below "
                f"task_time_limit_s ({self.task_time_limit_s}) so a task can clean up before "
                "it is killed. Lower AGENTFLEET_TASK_SOFT_TIME_LIMIT_S."
            )
        shared = sorted(set(self.fanouts) & set(self.schedules))
        if shared:
            raise ValueError(
                f"{', '.join(shared)} is defined both under [fanouts] and [schedules]; a fan-out "
                "name must be unique. Rename or remove one of them in agentfleet.toml."
            )
        slots = max(self.worker.concurrency, self.worker.max_slots)
        if slots >= self.broker_max_connections:
            raise ValueError(
                f"broker_max_connections ({self.broker_max_connections}) must exceed the worker pool "
                f"size ({slots}): every busy slot may need its own Redis connection to acknowledge "
                "its message, and past the cap acknowledgements fail. Raise "
                "AGENTFLEET_BROKER_MAX_CONNECTIONS or lower the pool size."
            )
        if (self.state_url or "").startswith("sentinel://") and not self.sentinel_master:
            raise ValueError(
                "state_url names Sentinels, which need the name of the master they watch. "
                "Set AGENTFLEET_SENTINEL_MASTER (sentinel_master in agentfleet.toml)."
            )
        if self.broker_url.startswith("sentinel://") and not self.sentinel_master:
            raise ValueError(
                "broker_url names Sentinels, which need the name of the master they watch. "
                "Set AGENTFLEET_SENTINEL_MASTER (sentinel_master in agentfleet.toml)."
            )
        if self.retry.backoff_base_s > self.retry.backoff_cap_s:
            raise ValueError(
                "retry.backoff_base_s must not exceed retry.backoff_cap_s. "
                "Lower AGENTFLEET_RETRY__BACKOFF_BASE_S or raise AGENTFLEET_RETRY__BACKOFF_CAP_S."
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = config_path()
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    # Derived values -----------------------------------------------------------------------

    @property
    def backend_url(self) -> str:
        """The Celery result backend: ``result_backend``, else the broker."""
        return self.result_backend or self.broker_url

    def redis_target(self) -> RedisTarget:
        """Where agentfleet keeps its own state (runs, dead letters, limits, circuits, spend):
        ``state_url``, else the broker's Redis; with the pool's size."""
        return self._target(self.state_url or self.broker_url)

    def broker_target(self) -> RedisTarget:
        """The broker's Redis, for what reads kombu's own keys (queues, unacknowledged messages)."""
        return self._target(self.broker_url)

    def _target(self, url: str) -> RedisTarget:
        return RedisTarget(
            url,
            sentinel_master=self.sentinel_master,
            sentinel_password=(self.sentinel_password.get_secret_value() if self.sentinel_password else None),
            max_connections=self.broker_max_connections,
            pool_timeout_s=self.delivery.pool_timeout_s,
            connect_timeout_s=self.delivery.redis_connect_timeout_s,
            socket_timeout_s=self.delivery.redis_timeout_s,
            health_check_s=self.delivery.redis_health_check_s,
        )

    @property
    def max_countdown_s(self) -> float:
        """The longest countdown that cannot run a task twice: 90% of the visibility timeout."""
        return self.visibility_timeout_s * 0.9

    def secret_values(self) -> list[str]:
        """Every secret value these settings know: credentials (read from their variable or
        file), the LLM API key, the service token, Flower's password and the broker password.

        Used to scrub stored errors and inputs; a credential that cannot be read is skipped.
        """
        found: list[str | None] = []
        for spec in self.credentials.values():
            if spec.env:
                found.append(os.environ.get(spec.env))
            elif spec.file:
                try:
                    found.append(Path(spec.file).read_text().strip())
                except OSError:
                    continue
        for secret in (
            self.llm.api_key,
            self.service.token,
            self.flower.basic_auth,
            self.approvals.link_secret,
        ):
            if secret is not None:
                value = secret.get_secret_value()
                found.extend([value, value.partition(":")[2]])
        found.append(os.environ.get("ANTHROPIC_API_KEY"))
        for url in (self.broker_url, self.result_backend, self.state_url):
            for part in (url or "").split(";"):
                found.append(url_password(part))
        if self.sentinel_password is not None:
            found.append(self.sentinel_password.get_secret_value())
        return [v for v in dict.fromkeys(found) if v]

    def redactor(self) -> Redactor:
        """Scrubs the keys named in ``dlq.redact_keys`` and every ``secret_values()``."""
        return Redactor.build(self.dlq.redact_keys, self.secret_values())

    def fanout(self, name: str) -> FanoutSpec:
        """The named fan-out: ``[fanouts.NAME]``, else ``[schedules.NAME]``."""
        found = self.fanouts.get(name) or self.schedules.get(name)
        if found is None:
            known = ", ".join(sorted([*self.fanouts, *self.schedules])) or "none"
            raise ConfigError(
                f"no fan-out named {name!r} (known: {known}); define it as [fanouts.{name}] "
                "in agentfleet.toml"
            )
        return found

    def limit_for(self, downstream: str) -> LimitSpec:
        """The limits of ``downstream``, else the default limits."""
        return self.limits.get(downstream, self.limiter.default)


def config_path() -> Path | None:
    """The TOML file to read: ``$AGENTFLEET_CONFIG`` (which must exist), else ``./agentfleet.toml``."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigError(
                f"{CONFIG_ENV} names {named}, which is not a file. "
                f"Point {CONFIG_ENV} at an agentfleet.toml or unset it."
            )
        return path
    local = Path("agentfleet.toml")
    return local if local.is_file() else None


# Values of these settings are never echoed back in an error message.
_SECRET_KEYS = frozenset({"token", "basic_auth", "api_key", "password", "redis_password"})


def _describe(error: dict[str, Any]) -> str:
    loc = [str(part) for part in error.get("loc", ())]
    toml_key = ".".join(loc) if loc else "(settings)"
    env_name = ENV_PREFIX + "__".join(loc).upper() if loc else ""
    msg = str(error.get("msg", "is invalid"))
    msg = msg.removeprefix("Value error, ")
    where = f"{env_name} / {toml_key}" if env_name else toml_key
    if error.get("type") == "extra_forbidden":
        return f"{where}: unknown setting; check its spelling against the README's settings table"
    value = error.get("input")
    secret = bool(loc) and loc[-1] in _SECRET_KEYS
    if isinstance(value, str):
        value = mask_url(value)
    shown = "" if secret or isinstance(value, dict) or value is None else f" (got {value!r})"
    return f"{where}: {msg}{shown}"


def load_settings(**overrides: Any) -> Settings:
    """Build settings now, raising ``ConfigError`` with one readable line per bad value."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        lines = [_describe(dict(err)) for err in exc.errors()]
        raise ConfigError("invalid configuration: " + "; ".join(lines)) from None
    except ValueError as exc:
        # pydantic-settings raises SettingsError (a ValueError) when env JSON will not parse.
        raise ConfigError(f"invalid configuration: {exc}") from None


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once."""
    return load_settings()


def reset_settings() -> None:
    """Forget the cached settings, so the next ``get_settings()`` reads again."""
    get_settings.cache_clear()
