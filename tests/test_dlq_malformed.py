"""A malformed queue entry in the dead-letter queue: listed, shown and counted like any entry,
never requeued (it names no task a worker could run: requeue says so), purged like any entry,
and counted on ``/metrics``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import redis
from dlq_samples import sample_entry
from malformed_support import encoded, envelope
from typer.testing import CliRunner, Result

from agentfleet.cli.app import app
from agentfleet.config import load_settings
from agentfleet.dlq import DeadLetter, DLQStore
from agentfleet.dlq.malformed import malformed_dead_letter
from agentfleet.redaction import Redactor
from agentfleet.service.collectors import collect_malformed

REASON = "its content type 'application/data' is not one the workers accept (application/json)"


@pytest.fixture
def env(redis_url: str, key_prefix: str) -> dict[str, str]:
    return {"AGENTFLEET_BROKER_URL": redis_url, "AGENTFLEET_KEY_PREFIX": key_prefix}


@pytest.fixture
def store(redis_client: redis.Redis, key_prefix: str) -> DLQStore:
    return DLQStore(redis_client, prefix=key_prefix)


@pytest.fixture
def malformed(store: DLQStore) -> DeadLetter:
    raw = encoded({**envelope("fleet_test_tasks.echo", queue="q.agents"), "content-type": "application/data"})
    entry = malformed_dead_letter(
        raw, REASON, queue="q.agents", worker="af1@host", redactor=Redactor(), keep_bytes=4096
    )
    assert store.keep_malformed(entry, max_entries=10)
    store.add(sample_entry(index=1))
    return entry


def _run(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(app, ["dlq", *args], env=env)


def test_it_is_listed_shown_and_counted_like_any_entry(env: dict[str, str], malformed: DeadLetter) -> None:
    listed = json.loads(_run(env, "list", "--category", "malformed", "--json").output)
    assert [e["id"] for e in listed] == [malformed.id]
    assert listed[0]["raw_message"] == malformed.raw_message and listed[0]["error"] == REASON
    shown = _run(env, "show", malformed.id).output
    for text in ("the entry as found in its queue", "application/data", "q.agents", "fleet_test_tasks.echo"):
        assert text in shown
    stats = json.loads(_run(env, "stats", "--json").output)
    assert stats["by_category"] == {"malformed": 1, "downstream_error": 1}
    assert "taken out of q.agents" in _run(env, "list").output


def test_requeue_skips_it_and_says_why_and_purge_removes_it(
    env: dict[str, str], malformed: DeadLetter
) -> None:
    (planned,) = json.loads(_run(env, "requeue", malformed.id, "--json").output)
    assert planned["action"] == "skipped" and "malformed message" in planned["reason"]
    result = _run(env, "requeue", malformed.id)
    assert result.exit_code == 0, result.output
    assert "0 of 1 entries requeued" in result.output
    assert "1 malformed entry cannot be requeued" in " ".join(result.output.split())
    (entry,) = json.loads(_run(env, "list", "--category", "malformed", "--json").output)
    assert entry["id"] == malformed.id, "still there"
    purged = _run(env, "purge", malformed.id, "--yes")
    assert purged.exit_code == 0 and "deleted 1 dead letters" in purged.output
    assert json.loads(_run(env, "list", "--category", "malformed", "--json").output) == []


def test_metrics_count_malformed_entries_kept_and_dropped(
    redis_url: str, key_prefix: str, store: DLQStore, malformed: DeadLetter
) -> None:
    store.count_malformed("dropped")

    settings = load_settings(broker_url=redis_url, key_prefix=key_prefix)
    sources = SimpleNamespace(settings=settings, store=SimpleNamespace(client=store.client))
    samples = {s.labels["outcome"]: s for s in collect_malformed(sources)}  # type: ignore[arg-type]
    assert {outcome: s.value for outcome, s in samples.items()} == {"dead_lettered": 1.0, "dropped": 1.0}
    assert {s.name for s in samples.values()} == {"agentfleet_malformed_messages_total"}
    assert all(s.kind == "counter" for s in samples.values())
