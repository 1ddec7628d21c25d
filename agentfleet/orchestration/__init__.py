"""Orchestration: ``Fleet`` dispatches, ``Run`` follows; fan-in helpers in ``merge``."""

from agentfleet.orchestration import merge
from agentfleet.orchestration.fleet import Fleet
from agentfleet.orchestration.run import Run

__all__ = ["Fleet", "Run", "merge"]
