"""The command line: help everywhere, and one clear line for a user's mistake."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = [
    [],
    ["demo"],
    ["run"],
    ["worker"],
    ["runs"],
    ["runs", "list"],
    ["runs", "show"],
    ["runs", "cancel"],
    ["runs", "compensate"],
    ["dlq"],
    *[["dlq", sub] for sub in ("list", "show", "stats", "requeue", "purge", "export")],
    ["mock-llm"],
    ["creds"],
    ["creds", "audit"],
    ["limits"],
    ["limits", "show"],
    ["limits", "plan"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_every_command_has_help(command: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", *command, "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "Usage" in out.stdout


def test_an_unreachable_broker_is_one_line_and_a_non_zero_exit() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", "runs", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"AGENTFLEET_BROKER_URL": "redis://127.0.0.1:1/0", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "no Redis answers at redis://127.0.0.1:1/0" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_bad_setting_is_one_line_naming_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", "runs", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"AGENTFLEET_VISIBILITY_TIMEOUT_S": "five", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2
    assert "AGENTFLEET_VISIBILITY_TIMEOUT_S" in out.stderr
    assert "Traceback" not in out.stderr


def test_run_reads_json_lines_and_names_the_first_bad_line(tmp_path: Path) -> None:
    from agentfleet.cli.run_cmd import read_inputs
    from agentfleet.errors import DispatchError

    good = tmp_path / "good.jsonl"
    good.write_text('{"text": "a"}\n\n{"text": "b"}\n')
    assert list(read_inputs(str(good))) == [{"text": "a"}, {"text": "b"}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n[1, 2]\n')
    with pytest.raises(DispatchError, match=r"bad\.jsonl line 2: each line must be a JSON object"):
        list(read_inputs(str(bad)))
    with pytest.raises(DispatchError, match="no such file"):
        read_inputs(str(tmp_path / "absent.jsonl"))


def test_an_empty_inputs_file_is_exit_2_and_sends_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", "run", "myapp.tasks.classify", "--inputs", str(empty)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"AGENTFLEET_BROKER_URL": "redis://127.0.0.1:1/0", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert f"--inputs {empty} holds no inputs" in out.stderr and "nothing was sent" in out.stderr
