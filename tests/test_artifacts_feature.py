"""The delivery feature that keeps a failed item's artifacts: which workspace, which patterns,
and that collecting never costs the item its dead letter."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentfleet.config import Settings
from agentfleet.dlq.artifacts import Artifact
from agentfleet.redaction import Redactor
from agentfleet.sandbox.spec import SandboxSpec
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.execution_state import new_context
from agentfleet.tasks.features import artifacts as feature
from agentfleet.tasks.features.artifacts import Evidence, artifact_patterns, workspace_of

SETTINGS = Settings(dlq={"artifact_patterns": ["*.log"], "artifact_max_bytes": 10})


def _context(workdir: Path | None) -> TaskContext:
    return new_context(
        task_id="t",
        run_id="r",
        item_key="i",
        idempotency_key="k",
        attempt=0,
        workdir_path=workdir,
        log=logging.LoggerAdapter(logging.getLogger("test.artifacts"), {}),
    )


def _delivery(workdir: Path | None, sandbox: SandboxSpec | None = None, ran: bool = True) -> Any:
    task = SimpleNamespace(name="tests.t", sandbox=sandbox)
    return SimpleNamespace(
        task=task,
        task_id="t",
        settings=SETTINGS,
        context=_context(workdir) if ran else None,
        redactor=Redactor.build(),
    )


def test_a_sandbox_spec_names_its_own_patterns_else_the_settings_do() -> None:
    plain = SimpleNamespace(sandbox=None)
    own = SimpleNamespace(sandbox=SandboxSpec(artifacts=["out/*.png"]))
    none_named = SimpleNamespace(sandbox=SandboxSpec())
    assert artifact_patterns(plain, SETTINGS) == ["*.log"]  # type: ignore[arg-type]
    assert artifact_patterns(own, SETTINGS) == ["out/*.png"]  # type: ignore[arg-type]
    assert artifact_patterns(none_named, SETTINGS) == ["*.log"]  # type: ignore[arg-type]


def test_no_scratch_directory_is_made_to_look_for_artifacts() -> None:
    ctx = _context(None)
    assert workspace_of(ctx, SimpleNamespace(sandbox=None)) is None  # type: ignore[arg-type]
    assert ctx._execution.workdir_path is None


def test_a_sandboxed_task_without_a_held_sandbox_falls_back_to_its_scratch_directory(tmp_path: Path) -> None:
    task = SimpleNamespace(sandbox=SandboxSpec(), name="tests.t")
    assert workspace_of(_context(tmp_path), task) == tmp_path  # type: ignore[arg-type]


def test_the_files_go_into_the_dead_letters_fields_cut_to_the_cap(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_bytes(b"0123456789 the end")
    fields: dict[str, Any] = {}
    Evidence().dead_letter(_delivery(tmp_path), fields)
    assert fields["artifacts"] == [
        Artifact(name="run.log", size_bytes=10, content_type="text/plain", truncated=True, original_bytes=18)
    ]
    assert fields["artifact_data"] == {"run.log": b"89 the end"}


def test_a_body_that_never_ran_keeps_nothing(tmp_path: Path) -> None:
    fields: dict[str, Any] = {}
    Evidence().dead_letter(_delivery(tmp_path, ran=False), fields)
    assert fields == {}


def test_a_failing_collection_is_logged_and_the_dead_letter_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise PermissionError("cannot read the workspace")

    monkeypatch.setattr(feature, "collect_artifacts", broken)
    fields: dict[str, Any] = {"stage_tasks": []}
    with caplog.at_level(logging.WARNING, logger="agentfleet.artifacts"):
        Evidence().dead_letter(_delivery(tmp_path), fields)
    assert fields == {"stage_tasks": []}
    assert "could not collect artifacts" in caplog.text
