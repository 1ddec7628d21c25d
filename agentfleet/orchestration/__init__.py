"""Orchestration: ``Fleet`` dispatches, ``Run`` follows."""

from agentfleet.orchestration.fleet import Fleet
from agentfleet.orchestration.run import Run

__all__ = ["Fleet", "Run"]
