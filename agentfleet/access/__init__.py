"""Who may use the service: failed credential checks counted per client, and console sessions.

Both live in Redis (keys listed in ``agentfleet.keys``), so every ``agentfleet serve`` process and an
``agentfleet mcp`` over HTTP agree on them.
"""

from agentfleet.access.sessions import SessionStore
from agentfleet.access.throttle import AuthThrottle, Failure, client_key, retry_after

__all__ = ["AuthThrottle", "Failure", "SessionStore", "client_key", "retry_after"]
