"""``agentfleet dlq``: listing as tables and JSON, show, stats, dry-run requeue, purge, export."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from dlq_samples import register_worker, sample_entry
from typer.testing import CliRunner, Result

from agentfleet.cli.app import app
from agentfleet.dlq import DeadLetter, DLQStore
from agentfleet.errors import ConfigError


@pytest.fixture
def env(redis_url: str, key_prefix: str) -> dict[str, str]:
    return {"AGENTFLEET_BROKER_URL": redis_url, "AGENTFLEET_KEY_PREFIX": key_prefix}


@pytest.fixture
def entries(redis_client: redis.Redis, key_prefix: str) -> list[DeadLetter]:
    register_worker(redis_client, key_prefix, "agentfleet.agents")
    store = DLQStore(redis_client, prefix=key_prefix)
    made = [
        sample_entry(index=0, traceback="Traceback (most recent call last):\n  ...\nValueError: boom"),
        sample_entry(
            index=1, category="poison", error_type="PoisonMessage", error="died 3 times", downstream=None
        ),
        sample_entry(index=2, downstream="vendor-b.example"),
    ]
    for entry in made:
        store.add(entry)
    return made


def _run(env: dict[str, str], *args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(app, ["dlq", *args], env=env, input=stdin)


def test_list_as_json_and_filtered(env: dict[str, str], entries: list[DeadLetter]) -> None:
    everything = json.loads(_run(env, "list", "--json").output)
    assert [e["id"] for e in everything] == [e.id for e in reversed(entries)]
    poison = json.loads(_run(env, "list", "--category", "poison", "--json").output)
    assert [e["id"] for e in poison] == [entries[1].id]
    table = _run(env, "list", "--downstream", "vendor-b.example").output
    assert entries[2].id in table and entries[0].id not in table


def test_show_has_everything_including_the_traceback(env: dict[str, str], entries: list[DeadLetter]) -> None:
    out = _run(env, "show", entries[0].id).output
    for text in (
        entries[0].task_name,
        entries[0].idempotency_key,
        "ValueError: boom",
        "attempts",
        "vendor-a.example",
    ):
        assert text in out
    assert json.loads(_run(env, "show", entries[0].id, "--json").output)["id"] == entries[0].id


def test_stats_as_json(env: dict[str, str], entries: list[DeadLetter]) -> None:
    stats = json.loads(_run(env, "stats", "--json").output)
    assert stats["depth"] == 3
    assert stats["by_category"] == {"downstream_error": 2, "poison": 1}
    assert stats["by_downstream"] == {"vendor-a.example": 1, "-": 1, "vendor-b.example": 1}
    assert "depth" in _run(env, "stats").output


def test_requeue_dry_run_changes_nothing(env: dict[str, str], entries: list[DeadLetter]) -> None:
    result = _run(env, "requeue", "--category", "downstream_error", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "dry run" in result.output and "2 of 2 entries would be requeued" in result.output
    assert len(json.loads(_run(env, "list", "--json").output)) == 3


def test_requeue_without_a_selection_refuses(env: dict[str, str], entries: list[DeadLetter]) -> None:
    result = _run(env, "requeue")
    assert isinstance(result.exception, ConfigError) and "--all" in str(result.exception)


def test_purge_asks_first(env: dict[str, str], entries: list[DeadLetter]) -> None:
    declined = _run(env, "purge", "--category", "poison", stdin="n\n")
    assert declined.exit_code == 1
    assert len(json.loads(_run(env, "list", "--json").output)) == 3
    accepted = _run(env, "purge", "--category", "poison", "--yes")
    assert accepted.exit_code == 0 and "deleted 1 dead letters" in accepted.output
    assert [e["id"] for e in json.loads(_run(env, "list", "--json").output)] == [entries[2].id, entries[0].id]


def test_export_writes_json_lines(env: dict[str, str], entries: list[DeadLetter], tmp_path: Path) -> None:
    lines = _run(env, "export", "--format", "jsonl").output.splitlines()
    assert [json.loads(line)["id"] for line in lines] == [e.id for e in entries]
    target = tmp_path / "dlq.jsonl"
    assert _run(env, "export", "--category", "poison", "--output", str(target)).exit_code == 0
    assert [json.loads(line)["id"] for line in target.read_text().splitlines()] == [entries[1].id]


def test_an_unknown_id_is_one_line_and_a_non_zero_exit(env: dict[str, str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", "dlq", "show", "no-such-entry"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0
    assert "no dead letter no-such-entry" in out.stderr and "Traceback" not in out.stderr


def test_the_documented_parent_category_requeues_what_it_names(
    env: dict[str, str], entries: list[DeadLetter]
) -> None:
    result = _run(env, "requeue", "--category", "permanent", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "1 of 1 entries would be requeued" in result.output
    assert entries[1].id in result.output


def test_an_unknown_category_is_one_line_listing_the_known_ones(
    env: dict[str, str], entries: list[DeadLetter]
) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agentfleet", "dlq", "requeue", "--category", "permannet", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2, out.stderr
    assert "no entries matched" not in out.stdout
    assert "'permannet' is no dead-letter category" in out.stderr and "permanent, transient" in out.stderr
    assert "downstream_error" in out.stderr and "Traceback" not in out.stderr


def test_show_requeue_and_purge_take_the_first_characters_of_an_id(
    env: dict[str, str], entries: list[DeadLetter]
) -> None:
    shown = json.loads(_run(env, "show", entries[0].id[:6], "--json").output)
    assert shown["id"] == entries[0].id
    dry = json.loads(_run(env, "requeue", entries[2].id[:6], "--dry-run", "--json").output)
    assert [r["id"] for r in dry] == [entries[2].id]
    assert _run(env, "purge", entries[1].id[:6], "--yes").exit_code == 0
    assert _run(env, "show", entries[1].id).exception is not None


def test_a_prefix_of_several_dead_letters_is_refused_naming_them(
    redis_client: redis.Redis, key_prefix: str, env: dict[str, str]
) -> None:
    store = DLQStore(redis_client, prefix=key_prefix)
    made = [sample_entry(index=i) for i in range(40)]
    for entry in made:
        store.add(entry)
    shared = next(a.id[:1] for a in made if sum(b.id.startswith(a.id[:1]) for b in made) > 1)
    result = _run(env, "show", shared)
    assert isinstance(result.exception, ConfigError)
    assert f"{shared} is the start of several dead letters" in str(result.exception)
    assert "give more of the id" in str(result.exception)
