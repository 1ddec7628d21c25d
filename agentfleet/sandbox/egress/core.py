"""What every connection of one sandbox's egress proxy shares: the rules and the way out.

``EgressCore`` holds the sandbox's declared destinations, the credentials it may name, the
limits of ``[egress]``, and one ``httpx.Client`` on the fleet's own transport stack::

    fleet transport (cluster-wide limits, per-destination concurrency, circuit, accounting)
      -> guard (SSRF check, address pinning, $CRED{...} filled in, credential audit)
        -> the real connection pool

so a sandbox's request meets exactly the rules a task's ``ctx.http`` request meets. Its vault
holds only the credentials the spec names: a placeholder of any other credential is refused
before anything is sent, and so is a value the guard finds going to the wrong host.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import httpx

from agentfleet.config import EgressSettings, Settings
from agentfleet.errors import ConfigError
from agentfleet.sandbox.egress.ca import LeafCertificates
from agentfleet.sandbox.egress.destinations import Destinations
from agentfleet.sandbox.egress.replies import Reply
from agentfleet.sandbox.egress.scrub import Reflections
from agentfleet.tools.audit import AuditLog
from agentfleet.tools.guard import TaskIdSource, guard_transport
from agentfleet.tools.pools import TransportPools
from agentfleet.tools.transport import FleetHooks, fleet_transport
from agentfleet.tools.vault import CredentialVault, references

__all__ = ["EgressCore", "EgressSpec", "EgressWiring"]

log = logging.getLogger("agentfleet.egress")


class EgressSpec(Protocol):
    """The part of a ``SandboxSpec`` the proxy reads."""

    @property
    def network(self) -> Sequence[str]: ...

    @property
    def credentials(self) -> Sequence[str]: ...


@dataclass
class EgressWiring:
    """The worker's collaborators for the proxy's transport. Each is optional.

    ``hooks``: the fleet transport's limiter, circuit breaker and execution gate (without one,
    no cluster-wide limit applies); ``audit``: the credential audit log; ``pools``: the
    process's shared connection pools (else the proxy's own, closed with it); ``task_id``: the
    execution the audit entries name.
    """

    hooks: FleetHooks = field(default_factory=FleetHooks)
    audit: AuditLog | None = None
    pools: TransportPools | None = None
    task_id: TaskIdSource = None


class EgressCore:
    """The rules and the client shared by a sandbox's proxy connections."""

    def __init__(
        self,
        settings: Settings,
        spec: EgressSpec,
        leaves: LeafCertificates,
        wiring: EgressWiring,
        *,
        run_id: str,
        task_name: str,
    ) -> None:
        self.limits: EgressSettings = settings.egress
        self.destinations = Destinations(spec.network)
        self.credentials = tuple(dict.fromkeys(spec.credentials))
        unknown = [name for name in self.credentials if name not in settings.credentials]
        if unknown:
            known = ", ".join(sorted(settings.credentials)) or "none"
            raise ConfigError(
                f"sandbox credentials name {unknown[0]!r}, which is not in the [credentials] "
                f"settings (configured: {known})"
            )
        self.leaves = leaves
        self.run_id = run_id
        self.task_name = task_name
        specs = {name: settings.credentials[name] for name in self.credentials}
        self.vault = CredentialVault(specs, audit=wiring.audit) if specs else None
        guard = guard_transport(
            httpx, settings=settings.fetch, vault=self.vault, task_id=wiring.task_id, pools=wiring.pools
        )
        timeout = httpx.Timeout(self.limits.upstream_timeout_s)
        self.client = httpx.Client(
            transport=fleet_transport(httpx, guard, wiring.hooks),
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
        )

    def refusal(self, scheme: str, host: str, port: int) -> Reply | None:
        """The refusal of a request to ``host:port`` that no declared destination admits."""
        if self.destinations.allows(host, port):
            return None
        shown = f"[{host}]" if ":" in host else host
        destination = f"{scheme}://{shown}:{port}"
        log.warning(
            "egress refused %s: not declared by task %s (run %s)", destination, self.task_name, self.run_id
        )
        return Reply(
            403,
            f"refused {destination}: not among the network destinations task {self.task_name!r} "
            f"declares ({self.destinations.declared()}); to allow it, add '{shown}:{port}' to "
            "network in the task's @fleet_task(sandbox=...)",
        )

    def credential_refusal(self, parts: Sequence[bytes], destination: str) -> Reply | None:
        """The refusal of a request whose ``parts`` name a credential the sandbox may not use."""
        for part in parts:
            for name in references(part):
                if name not in self.credentials:
                    log.warning(
                        "egress refused credential %r to %s for task %s (run %s): not named by its sandbox",
                        name,
                        destination,
                        self.task_name,
                        self.run_id,
                    )
                    allowed = ", ".join(self.credentials) or "none"
                    return Reply(
                        403,
                        f"refused {destination}: credential {name!r} is not among the credentials task "
                        f"{self.task_name!r} may use ({allowed}); name it in the task's sandbox "
                        "credentials",
                    )
        return None

    def reflections(self) -> Reflections:
        """The spellings of this sandbox's credential values, to keep out of responses."""
        vault = self.vault
        if vault is None:
            return Reflections(())
        return Reflections.of(self.credentials, vault.value)

    def close(self) -> None:
        self.client.close()
