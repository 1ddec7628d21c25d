"""run_command: refusals without processes, then real processes (slow)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from agentfleet.config import CommandToolSettings
from agentfleet.errors import ForbiddenDestination, InvalidInput
from agentfleet.tools.command import RUN_COMMAND_TOOL, run_command

PYTHON = os.path.realpath(sys.executable)
SH = shutil.which("sh") or "/bin/sh"


def _on(*allow: str, **changes: object) -> CommandToolSettings:
    return CommandToolSettings(enabled=True, allow=list(allow), **changes)  # type: ignore[arg-type]


def test_disabled_by_default(tmp_path: Path) -> None:
    with pytest.raises(ForbiddenDestination, match="disabled"):
        run_command(["true"], settings=CommandToolSettings(allow=["true"]), workdir=tmp_path)


@pytest.mark.parametrize(
    ("argv", "allow"),
    [
        (["rm", "-rf", "/"], ["true"]),
        (["/bin/true"], ["true"]),  # a basename entry does not allow a path
        (["./true"], ["true"]),
        (["../bin/true"], ["/bin/true"]),  # a path entry wants an absolute path
        (["true"], ["/bin/true"]),  # and a path entry does not allow the bare name
        (["sh", "-c", "true"], []),
    ],
)
def test_only_allowlisted_programs(tmp_path: Path, argv: list[str], allow: list[str]) -> None:
    with pytest.raises(ForbiddenDestination):
        run_command(argv, settings=_on(*allow), workdir=tmp_path)


def test_a_file_the_task_wrote_cannot_pass_for_an_allowed_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "pytest"
    fake.write_text("#!/bin/sh\necho pwned\n")
    fake.chmod(0o755)
    # Even with the scratch directory and '.' on PATH, it is not found there.
    monkeypatch.setenv("PATH", f".:{tmp_path}:/nonexistent")
    with pytest.raises(ForbiddenDestination, match="not found on PATH"):
        run_command(["pytest"], settings=_on("pytest"), workdir=tmp_path)
    with pytest.raises(ForbiddenDestination):
        run_command([str(fake)], settings=_on("pytest"), workdir=tmp_path)


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        ([], None),
        ("true", None),
        (["tr\x00ue"], None),
        ([""], None),
        (["true"], {"1BAD": "x"}),
        (["true"], {"OK": "nul\x00"}),
    ],
)
def test_malformed_input(tmp_path: Path, argv: object, env: dict[str, str] | None) -> None:
    with pytest.raises(InvalidInput):
        run_command(argv, settings=_on("true"), workdir=tmp_path, env=env)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["PATH", "HOME", "LD_PRELOAD", "ld_library_path", "DYLD_INSERT"])
def test_reserved_variables_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ForbiddenDestination, match="reserved"):
        run_command(["true"], settings=_on("true"), workdir=tmp_path, env={name: "x"})


def test_a_missing_workdir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="working directory"):
        run_command(["true"], settings=_on("true"), workdir=tmp_path / "absent")


def test_the_tool_definition() -> None:
    assert RUN_COMMAND_TOOL["name"] == "run_command"
    assert RUN_COMMAND_TOOL["input_schema"]["required"] == ["argv"]
    json.dumps(RUN_COMMAND_TOOL)


@pytest.mark.slow
def test_runs_in_the_workdir_with_a_scrubbed_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AF_PARENT_SECRET", "must-not-leak")
    code = "import json, os; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ)}))"
    result = run_command(
        [PYTHON, "-c", code], settings=_on(PYTHON), workdir=tmp_path, env={"TASK_VAR": "given"}
    )
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    assert Path(seen["cwd"]) == tmp_path.resolve()
    env = seen["env"]
    assert "AF_PARENT_SECRET" not in env
    assert env["HOME"] == str(tmp_path.resolve())
    assert env["TASK_VAR"] == "given"
    assert set(env) - {"LC_CTYPE"} <= {"PATH", "HOME", "LANG", "TASK_VAR"}
    assert all(os.path.isabs(entry) for entry in env["PATH"].split(os.pathsep))
    assert (result.timed_out, result.stdout_truncated, result.stderr_truncated) == (
        False,
        False,
        False,
    )


@pytest.mark.slow
def test_a_bare_name_is_found_on_path_and_exit_codes_are_results(tmp_path: Path) -> None:
    result = run_command(["sh", "-c", "echo out; echo err >&2; exit 3"], settings=_on("sh"), workdir=tmp_path)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.argv == ["sh", "-c", "echo out; echo err >&2; exit 3"]
    assert result.duration_s >= 0


@pytest.mark.slow
def test_a_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    script = "sleep 30 & echo $! > child.pid; sleep 30"
    started = time.monotonic()
    result = run_command([SH, "-c", script], settings=_on(SH, timeout_s=30), workdir=tmp_path, timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert result.timed_out is True
    assert result.exit_code < 0
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.02)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_the_timeout_cannot_exceed_the_setting(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_command(
        [SH, "-c", "sleep 10"], settings=_on(SH, timeout_s=0.3), workdir=tmp_path, timeout_s=60
    )
    assert result.timed_out and time.monotonic() - started < 3


@pytest.mark.slow
def test_output_is_capped_head_and_tail(tmp_path: Path) -> None:
    code = "import sys; sys.stdout.write('BEGIN' + 'x' * 1_000_000 + 'END'); sys.stderr.write('e' * 10)"
    result = run_command([PYTHON, "-c", code], settings=_on(PYTHON, max_output_bytes=1000), workdir=tmp_path)
    assert result.exit_code == 0
    assert result.stdout_truncated is True
    assert result.stdout.startswith("BEGIN")
    assert result.stdout.endswith("END")
    assert "bytes omitted" in result.stdout
    assert len(result.stdout) < 1100
    assert (result.stderr, result.stderr_truncated) == ("e" * 10, False)
