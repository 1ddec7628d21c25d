"""Fleet tasks: ``fleet_task``, ``FleetTask``, ``TaskContext``."""

from agentfleet.protocol.task import FleetTask
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.decorator import fleet_task

__all__ = ["FleetTask", "TaskContext", "fleet_task"]
