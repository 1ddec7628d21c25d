"""Evidence of failure: an item that fails for good keeps, with its dead letter, the files it
left in its workspace that match its artifact patterns (screenshots, logs, test reports).

The workspace is the item's sandbox workspace when its task runs in a sandbox, else its
scratch directory (``ctx.workdir``, only when the body made one). The patterns are the task's
sandbox spec's ``artifacts``, else ``dlq.artifact_patterns``. The files are read at the
``dead_letter`` hook point: the body has ended, and its workspace is still there (it is
removed when the execution closes, after the outcome is decided). Collecting never changes the
item's outcome: a workspace that cannot be read is logged and the entry keeps no artifacts.
What is read, how and under which caps: ``agentfleet.dlq.evidence``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfleet.config import Settings
from agentfleet.dlq.evidence import ArtifactCaps, collect_artifacts
from agentfleet.errors import ConfigError
from agentfleet.tasks.execution_state import execution_of
from agentfleet.tasks.hooks import DeliveryFeature

if TYPE_CHECKING:
    from agentfleet.protocol.task import FleetTask
    from agentfleet.sandbox.spec import SandboxSpec
    from agentfleet.tasks.context import TaskContext
    from agentfleet.tasks.execution import Delivery

__all__ = ["Evidence", "artifact_caps", "artifact_patterns", "workspace_of"]

log = logging.getLogger("agentfleet.artifacts")


def artifact_caps(settings: Settings) -> ArtifactCaps:
    """The caps of ``settings``' ``[dlq]`` section."""
    dlq = settings.dlq
    return ArtifactCaps(
        file_bytes=dlq.artifact_max_bytes,
        total_bytes=dlq.artifact_max_total_bytes,
        max_files=dlq.artifact_max_files,
        max_walk=dlq.artifact_max_walk,
    )


def artifact_patterns(task: FleetTask, settings: Settings) -> list[str]:
    """The artifact patterns of ``task``: its sandbox spec's, else the settings' default."""
    spec: SandboxSpec | None = task.sandbox
    own = list(spec.artifacts) if spec is not None else []
    return own or list(settings.dlq.artifact_patterns)


def workspace_of(ctx: TaskContext, task: FleetTask) -> Path | None:
    """The directory the execution behind ``ctx`` worked in: its sandbox's workspace when
    ``task`` has a sandbox and the delivery holds one, else its scratch directory if the body
    made one (none is made here)."""
    if task.sandbox is not None:
        try:
            return ctx.sandbox.workspace
        except ConfigError:
            pass
    return execution_of(ctx).workdir_path


class Evidence(DeliveryFeature):
    name = "artifacts"

    def dead_letter(self, d: Delivery, fields: dict[str, Any]) -> None:
        if d.context is None:
            return
        workspace = workspace_of(d.context, d.task)
        patterns = artifact_patterns(d.task, d.settings)
        if workspace is None or not patterns:
            return
        try:
            found = collect_artifacts(workspace, patterns, artifact_caps(d.settings), redactor=d.redactor)
        except Exception:  # evidence is a courtesy: it must never cost the item its dead letter
            log.warning("%s[%s]: could not collect artifacts", d.task.name, d.task_id, exc_info=True)
            return
        for why in found.skipped:
            log.info("%s[%s]: artifact passed over: %s", d.task.name, d.task_id, why)
        fields["artifacts"] = found.artifacts
        fields["artifact_data"] = found.data
