"""The ``[egress]`` table: the limits of the egress proxy that stands between a sandbox and the network."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EgressSettings"]


class EgressSettings(BaseModel):
    """What one sandbox's egress proxy allows (``agentfleet.sandbox.egress``).

    ``max_connections``: connections one sandbox may hold open to its proxy at once (a
    connection over the cap is answered 503 and closed). ``idle_timeout_s``: seconds a
    connection may sit without sending a byte (between requests, or inside one) before it is
    closed. ``upstream_timeout_s``: seconds to wait for a destination to connect or to send
    its next bytes. ``max_request_bytes`` / ``max_response_bytes``: the largest body one
    request may send (else 413) and one response may bring back (the response is cut and its
    connection closed), in bytes. ``max_header_bytes``: the largest request head (request
    line and headers), in bytes. ``leaf_cache``: how many hosts' TLS certificates a worker
    keeps made.
    """

    model_config = ConfigDict(extra="forbid")

    max_connections: int = Field(default=32, ge=1)
    idle_timeout_s: float = Field(default=60.0, gt=0)
    upstream_timeout_s: float = Field(default=60.0, gt=0)
    max_request_bytes: int = Field(default=20_000_000, ge=1)
    max_response_bytes: int = Field(default=200_000_000, ge=1)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    leaf_cache: int = Field(default=256, ge=1)
