"""The clients a ``TaskContext`` hands out, wired onto the fleet transport.

``ctx.http`` is an ``httpx.Client`` and ``ctx.anthropic`` an ``anthropic.Anthropic`` (on an
``httpx2.Client``, the package the SDK is built on). Both send every request through::

    fleet transport (circuit, limits, 429 pauses, usage and cost)
      -> guard (SSRF check, address pinning, $CRED{...} credentials, audit)
        -> the real connection pool

The limiter, circuit breaker, vault and audit log are made once per worker process.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import httpx

from agentfleet.config import CredentialSpec, Settings, get_settings
from agentfleet.errors import BudgetExceeded, ConfigError, RateLimited, error_for_status
from agentfleet.llm.pricing import cost_usd
from agentfleet.ratelimit import Permit
from agentfleet.ratelimit.names import pool_downstream
from agentfleet.redis_client import connect
from agentfleet.tasks.shared import limiter, per_process, run_store, spend_ledger
from agentfleet.tools.audit import AuditLog
from agentfleet.tools.guard import guard_transport
from agentfleet.tools.transport import CallInfo, FleetHooks, Usage, fleet_transport
from agentfleet.tools.vault import CredentialVault, placeholder

if TYPE_CHECKING:
    import anthropic

    from agentfleet.tasks.context import TaskContext

__all__ = ["ANTHROPIC_CREDENTIAL", "anthropic_client", "http_client", "llm_endpoint", "pool_slot"]

T = TypeVar("T")

ANTHROPIC_API = "https://api.anthropic.com"
ANTHROPIC_CREDENTIAL = "anthropic"


def pool_slot(settings: Settings, run_id: str, slots: int) -> Permit:
    """One of run ``run_id``'s ``slots`` execution slots, held until released.

    Waits up to ``limiter.short_wait_s`` seconds, then raises ``Deferred`` with the wait. The
    lease is renewed while held and comes back by itself if the worker dies.
    """
    return limiter(settings).acquire(pool_downstream(run_id, slots))


def _audit(settings: Settings) -> AuditLog:
    return per_process("audit", settings, lambda: AuditLog(connect(settings.broker_url), settings.key_prefix))


def llm_endpoint(settings: Settings) -> tuple[str, str | None]:
    """The Messages API base URL and the environment variable holding its key (None: no key).

    A key in ``ANTHROPIC_API_KEY`` (or ``llm.api_key``) means the real API unless
    ``llm.base_url`` says otherwise; no key needs ``llm.base_url`` (the mock server).
    """
    if settings.llm.api_key is not None:
        key_env: str | None = "AGENTFLEET_LLM__API_KEY"
    elif os.environ.get("ANTHROPIC_API_KEY"):
        key_env = "ANTHROPIC_API_KEY"
    else:
        key_env = None
    base = settings.llm.base_url
    if base is None and key_env is None:
        raise ConfigError(
            "no LLM endpoint: set ANTHROPIC_API_KEY for the Anthropic API, or "
            "AGENTFLEET_LLM__BASE_URL to a Messages API such as `agentfleet mock-llm`"
        )
    return (base or ANTHROPIC_API).rstrip("/"), key_env


def _vault(settings: Settings, *, llm_host: str | None, key_env: str | None) -> CredentialVault:
    specs = dict(settings.credentials)
    if llm_host and key_env and ANTHROPIC_CREDENTIAL not in specs:
        # The LLM key travels like any credential: filled in at the wire, audited per use.
        specs[ANTHROPIC_CREDENTIAL] = CredentialSpec(env=key_env, domains=[llm_host])
    environ: dict[str, str] | None = None  # None: the vault reads os.environ at each use
    if settings.llm.api_key is not None:
        environ = {**os.environ, "AGENTFLEET_LLM__API_KEY": settings.llm.api_key.get_secret_value()}
    return CredentialVault(specs, audit=_audit(settings), environ=environ)


def _hooks(ctx: TaskContext, settings: Settings, llm_hosts: frozenset[str]) -> FleetHooks:
    def on_call(info: CallInfo) -> None:
        ctx.note_downstream(info.downstream)

    ledger = spend_ledger(settings)
    runs = run_store(settings) if settings.budgets.run_usd else None

    def on_usage(info: CallInfo, usage: Usage) -> None:
        assert info.model is not None
        spent = cost_usd(info.model, usage.as_dict(), settings.llm.prices)
        ctx.add_usage(
            cost_usd=spent,
            input_tokens=usage.input_tokens
            + usage.cache_creation_input_tokens
            + usage.cache_read_input_tokens,
            output_tokens=usage.output_tokens,
        )
        ledger.record(ctx.run_id, info.downstream, spent)
        if runs is not None:
            runs.add_spend(ctx.run_id, spent)

    def gate() -> None:
        ctx.check_budget()
        spent, own_cap = ledger.standing(ctx.run_id)
        run_cap = own_cap if own_cap is not None else settings.budgets.run_usd
        if run_cap is not None and spent >= run_cap:
            # The whole run is over budget: items that have not started will not run.
            run_store(settings).fail_fast(ctx.run_id)
            source = "given when it started" if own_cap is not None else "budgets.run_usd"
            raise BudgetExceeded(f"the run spent ${spent:.4f} of its ${run_cap:.4f} budget ({source})")

    return FleetHooks(
        limiter=limiter(settings),
        breaker=ctx.breaker,
        gate=gate,
        on_call=on_call,
        on_usage=on_usage,
        llm_hosts=llm_hosts,
        default_pause_s=settings.limiter.pause_without_retry_after_s,
    )


def _llm_hosts(settings: Settings) -> frozenset[str]:
    hosts = {"api.anthropic.com"}
    if settings.llm.base_url:
        hosts.add((urlsplit(settings.llm.base_url).hostname or "").lower())
    return frozenset(hosts)


def _raise_for_rate_limit(response: httpx.Response) -> None:
    # The fleet owns retries: a 429 or 529 ends the attempt, carrying the downstream's wait.
    if response.status_code in (429, 529):
        response.read()
        err = error_for_status(
            response.status_code,
            message=f"HTTP {response.status_code} from {response.request.url.host}",
            headers=dict(response.headers),
            body=response.text[:2000],
            downstream=response.request.url.host,
        )
        raise err or RateLimited(downstream=response.request.url.host)


def http_client(ctx: TaskContext) -> httpx.Client:
    """An ``httpx.Client`` for one execution, on the fleet transport and the guard."""
    settings = get_settings()
    vault = _vault(settings, llm_host=None, key_env=None)
    guard = guard_transport(httpx, settings=settings.fetch, vault=vault, task_id=ctx.task_id)
    transport = fleet_transport(httpx, guard, _hooks(ctx, settings, _llm_hosts(settings)))
    return httpx.Client(
        transport=transport,
        timeout=httpx.Timeout(settings.fetch.timeout_s, connect=settings.llm.connect_timeout_s),
        follow_redirects=False,
        trust_env=False,
        event_hooks={"response": [_raise_for_rate_limit]},
    )


def anthropic_client(ctx: TaskContext) -> anthropic.Anthropic:
    """An ``anthropic.Anthropic`` for one execution: ``max_retries=0``, on the fleet transport."""
    import anthropic
    import httpx2

    settings = get_settings()
    base_url, key_env = llm_endpoint(settings)
    host = (urlsplit(base_url).hostname or "").lower()
    vault = _vault(settings, llm_host=host, key_env=key_env)
    # The operator chose this endpoint, so a loopback mock is reachable through the guard.
    fetch = settings.fetch.model_copy(
        update={"allow_private_hosts": [*settings.fetch.allow_private_hosts, host]}
    )
    guard = guard_transport(httpx2, settings=fetch, vault=vault, task_id=ctx.task_id)
    transport = fleet_transport(httpx2, guard, _hooks(ctx, settings, _llm_hosts(settings)))
    timeout = httpx2.Timeout(settings.llm.timeout_s, connect=settings.llm.connect_timeout_s)
    http = httpx2.Client(transport=transport, timeout=timeout, trust_env=False)
    uses_credential = key_env is not None or ANTHROPIC_CREDENTIAL in settings.credentials
    api_key: Any = placeholder(ANTHROPIC_CREDENTIAL) if uses_credential else "no-key-needed"
    return anthropic.Anthropic(
        api_key=api_key, base_url=base_url, max_retries=0, http_client=http, timeout=timeout
    )
