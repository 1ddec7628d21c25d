"""Sandboxes: each item's programs run isolated, reach the network only through the fleet.

``spec`` (what a task declares), ``backend`` (the interface), ``bubblewrap`` and ``plain`` (the
backends), ``pool`` (the warm pool), ``egress`` (the egress proxy). See docs/sandbox.md.
"""

from agentfleet.sandbox.backend import WORKSPACE_INSIDE, Backend, Sandbox
from agentfleet.sandbox.spec import SandboxLimits, SandboxResult, SandboxSpec, parse_spec, resolve_spec

__all__ = [
    "WORKSPACE_INSIDE",
    "Backend",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "SandboxSpec",
    "parse_spec",
    "resolve_spec",
]
