"""The command line for people: full run ids and their prefixes, tables that fit 80 columns,
the API's own error messages, progress that tells, --version, completion, Celery options."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import testing_seam_tasks as tasks
from dlq_samples import sample_entry
from typer.testing import CliRunner

from agentfleet import Fleet, __version__
from agentfleet.cli import worker_cmd
from agentfleet.cli.app import app
from agentfleet.cli.progress import RunProgress
from agentfleet.config import Settings, load_settings
from agentfleet.dlq.store import DLQStore
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.ratelimit import Limiter
from agentfleet.testing import run_task

AGENTFLEET = Path(sys.executable).parent / "agentfleet"


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(broker_url=redis_url, key_prefix=key_prefix, dispatch={"require_workers": False})


def _cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "COLUMNS": "80",
        "AGENTFLEET_BROKER_URL": settings.broker_url,
        "AGENTFLEET_KEY_PREFIX": settings.key_prefix,
    }
    return subprocess.run(
        [sys.executable, "-m", "agentfleet", *args], capture_output=True, text=True, timeout=60, env=env
    )


def _words(text: str) -> set[str]:
    return set(re.findall(r"[\w:.@/-]+", text))


def test_runs_list_shows_whole_run_ids_at_80_columns(settings: Settings) -> None:
    with Fleet(settings) as fleet:
        run = fleet.map("t.echo", [{"n": 1}], name="a-rather-long-run-name")
    out = _cli(settings, "runs", "list")
    assert out.returncode == 0, out.stderr
    assert run.id in out.stdout
    assert max(len(line) for line in out.stdout.splitlines()) <= 80


def test_runs_show_takes_the_first_characters_of_a_run_id(settings: Settings) -> None:
    with Fleet(settings) as fleet:
        run = fleet.map("t.echo", [{"n": 1}], name="by-prefix")
        assert fleet.get_run(run.id[:6]).id == run.id
    out = _cli(settings, "runs", "show", run.id[:6])
    assert out.returncode == 0, out.stderr
    assert f"run {run.id} (by-prefix)" in out.stdout


def test_a_prefix_of_several_runs_is_refused_naming_them(settings: Settings) -> None:
    with Fleet(settings) as fleet:
        ids = [fleet.map("t.echo", [{"n": 1}]).id for _ in range(40)]
    shared = next(a[:1] for a in ids if sum(b.startswith(a[:1]) for b in ids) > 1)
    out = _cli(settings, "runs", "show", shared)
    assert out.returncode == 2
    assert f"{shared} is the start of several runs" in out.stderr and "give more of the id" in out.stderr


def test_runs_show_names_a_downstream_paused_for_every_worker(settings: Settings) -> None:
    with Fleet(settings) as fleet:
        run = fleet.map("t.echo", [{"n": 1}])
        Limiter.from_settings(settings, fleet.store.client).pause("anthropic:claude-haiku-4-5", 470)
        paused_at = time.monotonic()
    out = _cli(settings, "runs", "show", run.id)
    waited_min = (time.monotonic() - paused_at) / 60
    said = re.search(
        r"anthropic:claude-haiku-4-5 is paused for every worker for (\d+\.\d)m more",
        " ".join(out.stdout.split()),
    )
    assert said, out.stdout
    # 470 s is 7.8 minutes; the pause counts down while the command starts (slowly, on a busy machine).
    assert 7.8 - waited_min - 0.1 <= float(said.group(1)) <= 7.8, (said.group(0), waited_min)


def test_the_dlq_table_at_80_columns_keeps_every_word_of_the_error(settings: Settings) -> None:
    error = (
        "400 invalid_request_error: FAIL 400 requested by the prompt, see the docs for what a prompt may hold"
    )
    with Fleet(settings) as fleet:
        DLQStore.from_settings(settings, fleet.store.client).add(
            sample_entry(error_type="BadRequest", error=error, downstream="anthropic:claude-haiku-4-5")
        )
    out = _cli(settings, "dlq", "list")
    assert out.returncode == 0, out.stderr
    assert _words(f"BadRequest: {error}") <= _words(out.stdout)
    assert max(len(line) for line in out.stdout.splitlines()) <= 80


def test_an_api_error_reads_as_the_apis_message_not_the_sdks_repr() -> None:
    with MockMessagesServer() as mock:
        outcome = run_task(tasks.label, {"text": "great\nFAIL 400"}, anthropic=mock)
    assert outcome.error_type == "BadRequest"
    assert (outcome.error or "").startswith("400 invalid_request_error: ")
    assert "{'type'" not in (outcome.error or "")


def test_progress_tells_retries_deferrals_pauses_and_the_time_left() -> None:
    progress = RunProgress(total=100, succeeded=38, failed=2, retries=3, deferrals=10, elapsed_s=20.0)
    progress.paused = {"anthropic:claude-haiku-4-5": 470.0}
    line = progress.line("classify")
    assert re.match(r"^\d\d:\d\d:\d\d classify: 40/100 done \(", line)
    assert "38 ok, 2 failed, 3 retries, 10 deferrals" in line
    assert "anthropic:claude-haiku-4-5 paused 7.8m" in line
    assert line.endswith("ETA 30s)")


def test_version() -> None:
    out = subprocess.run([str(AGENTFLEET), "--version"], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"agentfleet {__version__}"


def test_shell_completion_completes_commands() -> None:
    env = {
        **os.environ,
        "_AGENTFLEET_COMPLETE": "complete_bash",
        "COMP_WORDS": "agentfleet ru",
        "COMP_CWORD": "1",
    }
    out = subprocess.run([str(AGENTFLEET)], capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.split() == ["run", "runs"]
    script = subprocess.run(
        [str(AGENTFLEET), "--show-completion", "bash"], capture_output=True, text=True, timeout=60
    )
    assert "_agentfleet_completion" in script.stdout


def test_worker_passes_options_it_does_not_know_on_to_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    executed: list[list[str]] = []
    monkeypatch.setattr(worker_cmd.os, "execv", lambda path, argv: executed.append(argv))
    result = CliRunner().invoke(
        app, ["worker", "--pool", "solo", "--max-tasks-per-child", "5", "--without-gossip"]
    )
    assert result.exit_code == 0, result.output
    assert executed[0][-3:] == ["--max-tasks-per-child", "5", "--without-gossip"]
    assert executed[0][executed[0].index("--pool") + 1] == "solo"
