"""The clients a ``TaskContext`` hands out, wired onto the fleet transport.

``ctx.http`` is an ``httpx.Client`` and ``ctx.anthropic`` an ``anthropic.Anthropic`` (on an
``httpx2.Client``, the package the SDK is built on). Both send every request through::

    fleet transport (circuit, limits, 429 pauses, usage and cost)
      -> guard (SSRF check, address pinning, $CRED{...} credentials, audit)
        -> the real connection pool

The limiter, circuit breaker and audit log are the worker runtime's, and so are the connection
pools under the guard (``WorkerRuntime.pools``): the guard checks each request, but tasks
share kept-alive connections instead of each opening its own (a TLS handshake per task).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import httpx

from agentfleet import tracing
from agentfleet.config import CredentialSpec, Settings, get_settings
from agentfleet.errors import ConfigError, RateLimited, error_for_status
from agentfleet.llm.anthropic import AnthropicAdapter
from agentfleet.llm.vendor import VendorAdapter, host_of
from agentfleet.llm.vendors import vendors_for
from agentfleet.models import TokenUsage
from agentfleet.ratelimit import Permit
from agentfleet.ratelimit.names import pool_downstream
from agentfleet.tasks.budgets import budget_hooks
from agentfleet.tasks.runtime import runtime
from agentfleet.tools.guard import guard_transport
from agentfleet.tools.transport import CallInfo, FleetHooks, describe_call, fleet_transport
from agentfleet.tools.vault import CredentialVault, placeholder

if TYPE_CHECKING:
    import anthropic

    from agentfleet.tasks.execution_state import ExecutionState

__all__ = [
    "ANTHROPIC_CREDENTIAL",
    "accounting_hooks",
    "anthropic_client",
    "fleet_hooks",
    "http_client",
    "llm_endpoint",
    "pool_slot",
    "rate_limit_raiser",
]

ANTHROPIC_CREDENTIAL = "anthropic"


def pool_slot(settings: Settings, run_id: str, slots: int) -> Permit:
    """One of run ``run_id``'s ``slots`` execution slots, held until released.

    Waits up to ``limiter.short_wait_s`` seconds, then raises ``Deferred`` with the wait. The
    lease is renewed while held and comes back by itself if the worker dies.
    """
    return runtime(settings).limiter.acquire(pool_downstream(run_id, slots))


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
    return (base or AnthropicAdapter.api_url()).rstrip("/"), key_env


def _vault(settings: Settings, *, llm_host: str | None, key_env: str | None) -> CredentialVault:
    specs = dict(settings.credentials)
    if llm_host and key_env and ANTHROPIC_CREDENTIAL not in specs:
        # The LLM key travels like any credential: filled in at the wire, audited per use.
        specs[ANTHROPIC_CREDENTIAL] = CredentialSpec(env=key_env, domains=[llm_host])
    environ: dict[str, str] | None = None  # None: the vault reads os.environ at each use
    if settings.llm.api_key is not None:
        environ = {**os.environ, "AGENTFLEET_LLM__API_KEY": settings.llm.api_key.get_secret_value()}
    return CredentialVault(specs, audit=runtime(settings).audit, environ=environ)


def accounting_hooks(
    state: ExecutionState, settings: Settings, vendors: Sequence[VendorAdapter]
) -> FleetHooks:
    """What every execution's transport does, Redis or not: note each downstream, read LLM
    usage with its vendor's adapter, price it, and check the execution's claim and budgets
    first."""

    def on_call(info: CallInfo) -> None:
        state.note_downstream(info.downstream)

    def on_usage(info: CallInfo, usage: TokenUsage) -> float:
        assert info.model is not None
        # The vendor is one of ``vendors``: the transport only knows it by its protocol.
        spent = cast(VendorAdapter, info.vendor).cost_usd(info.model, usage, settings.llm.prices)
        state.add_usage(cost_usd=spent, input_tokens=usage.total_input, output_tokens=usage.output_tokens)
        return spent

    return FleetHooks(
        gate=state.gate,
        on_call=on_call,
        on_usage=on_usage,
        vendors=vendors,
        default_pause_s=settings.limiter.pause_without_retry_after_s,
    )


def _hooks(state: ExecutionState, settings: Settings, vendors: Sequence[VendorAdapter]) -> FleetHooks:
    """``accounting_hooks`` plus the cluster: limiter, circuit breaker, the spend ledger and
    every budget (see ``tasks/budgets.py``)."""
    hooks = accounting_hooks(state, settings, vendors)
    hooks = dataclasses.replace(hooks, limiter=runtime(settings).limiter, breaker=state.breaker)
    return budget_hooks(state, settings, hooks)


def fleet_hooks(state: ExecutionState, settings: Settings) -> FleetHooks:
    """The hooks every request of ``state``'s execution meets (``ctx.http``'s, a sandbox's egress
    proxy's): the cluster's limits and circuits, accounting, budgets and the claim check."""
    return _hooks(state, settings, vendors_for(settings))


def rate_limit_raiser(vendors: Sequence[VendorAdapter]) -> Any:
    """The response hook of ``ctx.http``: a 429 or 529 raises at once (the fleet owns retries),
    mapped by the call's vendor when it is an LLM call (a spend limit is then permanent)."""

    def raise_for_rate_limit(response: httpx.Response) -> None:
        if response.status_code not in (429, 529):
            return
        response.read()
        host = response.request.url.host
        call = describe_call(response.request, vendors)
        err = (
            cast(VendorAdapter, call.vendor).error_for_response(
                response.status_code, dict(response.headers), response.text[:2000], call.model
            )
            if call.vendor is not None
            else error_for_status(
                response.status_code,
                message=f"HTTP {response.status_code} from {host}",
                headers=dict(response.headers),
                body=response.text[:2000],
                downstream=host,
            )
        )
        raise err or RateLimited(downstream=host)

    return raise_for_rate_limit


def http_client(state: ExecutionState) -> httpx.Client:
    """An ``httpx.Client`` for one execution, on the fleet transport and the guard."""
    settings = get_settings()
    # The LLM key is in this vault too: a task may send it to the API's host only, and the
    # guard refuses its value anywhere else (an echo the task copied, say).
    llm_host, key_env = None, None
    with contextlib.suppress(ConfigError):
        base_url, key_env = llm_endpoint(settings)
        llm_host = host_of(base_url)
    vault = _vault(settings, llm_host=llm_host, key_env=key_env)
    guard = guard_transport(
        httpx,
        settings=settings.fetch,
        vault=vault,
        task_id=state.task_id,
        pools=runtime(settings).pools(httpx),
    )
    vendors = vendors_for(settings)
    transport = fleet_transport(httpx, guard, _hooks(state, settings, vendors))
    return httpx.Client(
        transport=transport,
        timeout=httpx.Timeout(settings.fetch.timeout_s, connect=settings.llm.connect_timeout_s),
        follow_redirects=False,
        trust_env=False,
        event_hooks={"response": [rate_limit_raiser(vendors)]},
    )


def anthropic_client(state: ExecutionState) -> anthropic.Anthropic:
    """An ``anthropic.Anthropic`` for one execution: ``max_retries=0``, on the fleet transport."""
    import anthropic
    import httpx2

    settings = get_settings()
    base_url, key_env = llm_endpoint(settings)
    host = host_of(base_url)
    vault = _vault(settings, llm_host=host, key_env=key_env)
    # The operator chose this endpoint, so a loopback mock is reachable through the guard.
    fetch = settings.fetch.model_copy(
        update={"allow_private_hosts": [*settings.fetch.allow_private_hosts, host]}
    )
    guard = guard_transport(
        httpx2, settings=fetch, vault=vault, task_id=state.task_id, pools=runtime(settings).pools(httpx2)
    )
    transport = fleet_transport(httpx2, guard, _hooks(state, settings, vendors_for(settings)))
    timeout = httpx2.Timeout(settings.llm.timeout_s, connect=settings.llm.connect_timeout_s)
    http = httpx2.Client(transport=transport, timeout=timeout, trust_env=False)
    uses_credential = key_env is not None or ANTHROPIC_CREDENTIAL in settings.credentials
    api_key: Any = placeholder(ANTHROPIC_CREDENTIAL) if uses_credential else "no-key-needed"
    return anthropic.Anthropic(
        api_key=api_key,
        base_url=base_url,
        max_retries=0,
        http_client=http,
        timeout=timeout,
        **_sdk_tracing_off(anthropic.Anthropic),
    )


@functools.cache
def _sdk_tracing_off(client_cls: type[Any]) -> dict[str, Any]:
    """With agentfleet's tracing on, the SDK's own spans and propagation off (the fleet
    transport makes the model call's span and carries its context), where the SDK has them."""
    if not tracing.enabled() or "open_telemetry" not in inspect.signature(client_cls).parameters:
        return {}
    return {"open_telemetry": {"traces": False, "propagation": False}}
