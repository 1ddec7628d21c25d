"""The egress proxy: a sandbox reaches the network only through the fleet.

``EgressProxy`` serves one sandbox on a Unix socket in the worker; ``bridge_argv`` and
``proxy_env`` start a program inside so that its HTTP and HTTPS go there. See
``docs/sandbox-network.md``.
"""

from agentfleet.sandbox.egress.bridge import bridge_argv, proxy_env
from agentfleet.sandbox.egress.core import EgressSpec, EgressWiring
from agentfleet.sandbox.egress.destinations import Destinations
from agentfleet.sandbox.egress.proxy import EgressProxy

__all__ = ["Destinations", "EgressProxy", "EgressSpec", "EgressWiring", "bridge_argv", "proxy_env"]
