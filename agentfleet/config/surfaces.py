"""The settings of what callers reach over the network: the service (and the MCP server over
HTTP, which shares its token and limits), approvals' links and webhook, and Flower.

A secret that guards one of them is a password, not a switch: empty, blank or shorter than
``MIN_SECRET_CHARS`` characters is refused when the settings are read, with how to make one.
"""

from __future__ import annotations

import string

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

__all__ = ["MIN_SECRET_CHARS", "ApprovalSettings", "FlowerSettings", "ServiceSettings", "strong_secret"]

MIN_SECRET_CHARS = 32


def strong_secret(value: str, what: str) -> None:
    """Raise ``ValueError`` (naming ``what`` but never the value) unless ``value`` is at least
    ``MIN_SECRET_CHARS`` characters and not all blank."""
    if not value.strip():
        problem = "is empty" if not value else "is blank"
    elif len(value) < MIN_SECRET_CHARS:
        problem = f"has only {len(value)} characters"
    else:
        return
    raise ValueError(
        f"{what} {problem}; it guards a surface, so it must be at least {MIN_SECRET_CHARS} "
        "characters: make one with `openssl rand -hex 32` (unset it to turn the surface off)"
    )


class ServiceSettings(BaseModel):
    """``agentfleet serve`` (and ``agentfleet mcp --transport http``): who may call, how fast, how slowly.

    ``token`` is the bearer token ``POST /runs``, ``GET /runs``, the console and the MCP server
    over HTTP require (they are off without one); at least 32 characters. ``/health`` says
    ``stale`` when work is queued and no item has completed for ``stale_after_s`` seconds.
    ``/health`` and ``/metrics`` read state the workers keep in Redis, waiting at most
    ``probe_timeout_s`` seconds for it. ``max_inputs`` caps the inputs one ``POST /runs`` may
    carry, ``max_body_bytes`` its body (a larger one answers 413) and ``max_json_depth`` how
    deeply its JSON may nest (422). A console session lasts ``console_session_s`` seconds.

    A caller that fails a token check ``auth_free_failures`` times is locked out (429) for
    ``auth_lockout_s`` seconds, each further failure twice as long up to
    ``auth_max_lockout_s``; its count is forgotten ``auth_forget_s`` seconds after its last
    failure. Counted per client address, in Redis.

    The HTTP server closes a connection that has not sent a request's headers within
    ``header_timeout_s`` seconds (of connecting, or of its previous response), or its body
    within ``body_timeout_s`` seconds of its headers; an idle connection after
    ``keepalive_s`` seconds. It serves at most ``max_connections`` connections at once (503
    beyond) and at most ``max_connections_per_client`` from one address (closed beyond).
    ``trusted_proxies`` are addresses whose ``X-Forwarded-For`` names the real client (none:
    the peer address is the client). ``max_run_usd`` is the largest ``budget_usd`` (US
    dollars) a ``POST /runs`` or MCP caller may give a run (default: ``budgets.run_usd``; a
    caller may lower the operator's cap, never raise it). ``public_url`` is the address people
    open the service at (behind a proxy, say), used in the links the CLI prints (default:
    ``http://host:port``). ``trace_url`` links the console's runs and items to their trace in
    a tracing UI: a URL with ``{trace_id}`` in it (``http://jaeger:16686/trace/{trace_id}``).
    """

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    token: SecretStr | None = None
    stale_after_s: float = Field(default=300.0, gt=0)
    probe_timeout_s: float = Field(default=0.5, gt=0)
    max_inputs: int = Field(default=10_000, ge=1)
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    max_json_depth: int = Field(default=64, ge=3, le=500)
    console_session_s: float = Field(default=8 * 3600.0, ge=60)
    auth_free_failures: int = Field(default=5, ge=1, le=100)
    auth_lockout_s: float = Field(default=1.0, gt=0)
    auth_max_lockout_s: float = Field(default=900.0, gt=0)
    auth_forget_s: float = Field(default=3600.0, gt=0)
    header_timeout_s: float = Field(default=10.0, gt=0, le=300)
    body_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    keepalive_s: int = Field(default=5, ge=1, le=300)
    max_connections: int = Field(default=256, ge=1)
    max_connections_per_client: int = Field(default=32, ge=1)
    trusted_proxies: list[str] = Field(default_factory=list)
    max_run_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    public_url: str | None = None
    trace_url: str | None = None

    @field_validator("trace_url")
    @classmethod
    def _trace_url_names_the_trace(cls, value: str | None) -> str | None:
        if value is None:
            return None
        fields = {name for _, name, _, _ in string.Formatter().parse(value) if name is not None}
        if fields != {"trace_id"} or not value.startswith(("http://", "https://")):
            raise ValueError(
                "must be an http(s) URL with {trace_id} as its only field, "
                "for example http://jaeger:16686/trace/{trace_id}"
            )
        return value

    @field_validator("token")
    @classmethod
    def _token_is_a_password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            strong_secret(value.get_secret_value(), "the service token")
        return value


class FlowerSettings(BaseModel):
    """Flower, however it is started: basic auth as ``user:password`` (a password of at least
    32 characters); binds ``host`` (loopback).

    Without ``basic_auth`` (nor auth given to Flower itself) Flower refuses to start unless
    ``insecure`` is true.
    """

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=5555, ge=1, le=65535)
    basic_auth: SecretStr | None = None
    insecure: bool = False

    @field_validator("basic_auth")
    @classmethod
    def _user_password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        user, sep, password = value.get_secret_value().partition(":")
        if not sep or not user or not password:
            raise ValueError("must be user:password, both non-empty")
        if "," in value.get_secret_value():
            raise ValueError("must be one user:password without commas (Flower splits the list on commas)")
        strong_secret(password, "Flower's password")
        return value


class ApprovalSettings(BaseModel):
    """Telling people about approvals, and the links that decide them.

    ``webhook_url``: where a new approval is POSTed as a Slack-shaped message (``{"text"}``)
    with its signed link, at most ``webhook_attempts`` tries of ``webhook_timeout_s`` seconds
    each (through the SSRF guard: a private address needs ``fetch.allow_private_hosts``).
    ``link_secret`` signs the links (at least 32 characters; default: a key derived from
    ``service.token``; workers and the service must share it); a link to an approval with no
    timeout stops working ``link_ttl_s`` seconds after the approval was made. Links point at
    ``service.public_url``.
    """

    model_config = ConfigDict(extra="forbid")

    webhook_url: str | None = None
    webhook_attempts: int = Field(default=3, ge=1, le=10)
    webhook_timeout_s: float = Field(default=5.0, gt=0, le=60)
    link_secret: SecretStr | None = None
    link_ttl_s: float = Field(default=7 * 86400.0, ge=60)

    @field_validator("link_secret")
    @classmethod
    def _secret_is_a_password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            strong_secret(value.get_secret_value(), "approvals.link_secret")
        return value

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL, e.g. https://hooks.slack.com/services/...")
        return value
