"""What every connection of one sandbox's egress proxy shares: the rules and the way out.

``EgressCore`` holds the sandbox's declared destinations, the credentials it may name, the
limits of ``[egress]``, and the fleet's own transport stack::

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
from urllib.parse import urlsplit

import httpx

from agentfleet.config import EgressSettings, Settings
from agentfleet.errors import ConfigError
from agentfleet.sandbox.egress.ca import LeafCertificates
from agentfleet.sandbox.egress.destinations import Destinations
from agentfleet.sandbox.egress.refusals import RefusalTally
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
    """The rules and the transport shared by a sandbox's proxy connections."""

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
        self._refusals = RefusalTally()
        self.run_id = run_id
        self.task_name = task_name
        self._audit = wiring.audit
        self._task_id = wiring.task_id
        specs = {name: settings.credentials[name] for name in self.credentials}
        self.vault = CredentialVault(specs, audit=wiring.audit) if specs else None
        guard = guard_transport(
            httpx, settings=settings.fetch, vault=self.vault, task_id=wiring.task_id, pools=wiring.pools
        )
        # The transport itself, not an ``httpx.Client``: a client would keep a cookie jar across
        # the sandbox's requests and add headers of its own; the proxy sends what it was sent.
        self.transport = fleet_transport(httpx, guard, wiring.hooks)
        seconds = self.limits.upstream_timeout_s
        self.timeouts = {"connect": seconds, "read": seconds, "write": seconds, "pool": seconds}

    def send(self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes) -> httpx.Response:
        """Send one request through the fleet transport; the response's body is not read yet."""
        request = httpx.Request(
            method, url, headers=headers, content=body, extensions={"timeout": self.timeouts}
        )
        response: httpx.Response = self.transport.handle_request(request)
        return response

    def refusal(self, scheme: str, host: str, port: int) -> Reply | None:
        """The refusal of a request to ``host:port`` that no declared destination admits."""
        if self.destinations.allows(host, port):
            return None
        shown = f"[{host}]" if ":" in host else host
        destination = f"{scheme}://{shown}:{port}"
        self._note(destination, "not declared by the task", domain=host)
        return Reply(
            403,
            f"refused {destination}: not among the network destinations task {self.task_name!r} "
            f"declares ({self.destinations.declared()}); to allow it, add '{shown}:{port}' to "
            "network in the task's @fleet_task(sandbox=...)",
            reason=f"Forbidden: {shown}:{port} is not in the task's sandbox network",
        )

    def credential_refusal(self, parts: Sequence[bytes], destination: str) -> Reply | None:
        """The refusal of a request whose ``parts`` name a credential the sandbox may not use."""
        for part in parts:
            for name in references(part):
                if name not in self.credentials:
                    why = f"credential {name!r} not named by the task's sandbox"
                    self._note(destination, why, domain=urlsplit(destination).hostname or "", credential=name)
                    allowed = ", ".join(self.credentials) or "none"
                    return Reply(
                        403,
                        f"refused {destination}: credential {name!r} is not among the credentials task "
                        f"{self.task_name!r} may use ({allowed}); name it in the task's sandbox "
                        "credentials",
                    )
        return None

    def _note(self, destination: str, why: str, *, domain: str, credential: str = "") -> None:
        """Record a refusal in the audit stream and the log as often as ``RefusalTally`` says
        (a program retrying in a loop must flood neither; a Redis that cannot take the entry
        changes nothing of the refusal). Only refusals come here: an allowed request never
        writes to the audit from this path."""
        decision = self._refusals.note(destination, why, domain=domain, credential=credential)
        audited = True
        if decision.repeats:
            audited = self._audit_refusal(
                destination, why, domain=domain, credential=credential, repeats=decision.repeats
            )
        count = decision.count
        if decision.log:
            if not audited:
                log.warning("egress: a refusal of task %s could not be audited", self.task_name)
            log.warning(
                "egress refused %s for task %s (run %s): %s (%d times so far)",
                destination,
                self.task_name,
                self.run_id,
                why,
                count,
            )

    def _audit_refusal(
        self, destination: str, why: str, *, domain: str, credential: str, repeats: int = 1
    ) -> bool:
        """Write one refusal to the audit stream; False when it failed (True without an audit)."""
        if self._audit is None:
            return True
        source = self._task_id
        try:
            task_id = source() if callable(source) else source
        except Exception:  # the task id is a nicety here; the refusal is recorded without it
            task_id = None
        entry = self._audit.record_refusal(
            task_id=task_id,
            run_id=self.run_id,
            task=self.task_name,
            destination=destination,
            domain=domain,
            reason=why,
            credential=credential,
            repeats=repeats,
        )
        return entry is not None

    def reflections(self) -> Reflections:
        """The spellings of this sandbox's credential values, to keep out of responses."""
        vault = self.vault
        if vault is None:
            return Reflections(())
        return Reflections.of(self.credentials, vault.value)

    def close(self) -> None:
        """Audit the refusals still counted, and close the transport."""
        for left in self._refusals.drain():
            where, why, repeats = left.destination, left.why, left.repeats
            self._audit_refusal(where, why, domain=left.domain, credential=left.credential, repeats=repeats)
        self.transport.close()
