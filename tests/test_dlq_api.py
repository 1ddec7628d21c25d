"""The dead-letter queue API in one shape: the same filter words select the same entries in
every call, the CLI goes through the API, and the module's docstring example runs as written."""

from __future__ import annotations

import io
import json
import time

import pytest
from dlq_samples import dead_item

from agentfleet.config import load_settings
from agentfleet.dlq import DeadLetter, DLQFilter
from agentfleet.errors import ConfigError
from agentfleet.orchestration import Fleet


@pytest.fixture
def fleet(redis_url: str, key_prefix: str) -> Fleet:
    # A queue no worker listens to: requeued messages stay there.
    settings = load_settings(
        broker_url=redis_url, key_prefix=key_prefix, queues={"agents": f"q-{key_prefix}"}
    )
    return Fleet(settings)


@pytest.fixture
def entries(fleet: Fleet) -> dict[str, DeadLetter]:
    return {
        "old_bad": dead_item(fleet, category="bad_request", dead_lettered_at=time.time() - 86400),
        "bad": dead_item(fleet, category="bad_request"),
        "vendor_b": dead_item(fleet, downstream="vendor-b.example"),
        "vendor_a": dead_item(fleet, downstream="vendor-a.example"),
    }


def test_the_docstring_example_runs_as_written(fleet: Fleet, entries: dict[str, DeadLetter]) -> None:
    dlq = fleet.dlq
    assert [entry.id for entry in dlq.list(category="bad_request", since="6h")] == [entries["bad"].id]
    assert dlq.stats(downstream="vendor-b.example").depth == 1
    [planned] = dlq.requeue(downstream="vendor-b.example", dry_run=True)
    assert (planned.id, planned.action) == (entries["vendor_b"].id, "would requeue")
    assert dlq.store.get(entries["vendor_b"].id) is not None
    [sent] = dlq.requeue(downstream="vendor-b.example")
    assert (sent.id, sent.action) == (entries["vendor_b"].id, "requeued")
    assert dlq.store.get(entries["vendor_b"].id) is None
    assert dlq.purge(ids=[entries["vendor_a"].id]) == [entries["vendor_a"].id]
    assert dlq.store.get(entries["vendor_a"].id) is None


def test_keywords_and_a_filter_object_select_the_same_entries_in_every_call(
    fleet: Fleet, entries: dict[str, DeadLetter]
) -> None:
    dlq = fleet.dlq
    words = {"category": "bad_request", "since": "6h"}
    flt = DLQFilter(category="bad_request", since="6h")
    expected = [entries["bad"].id]
    assert [e.id for e in dlq.list(**words)] == [e.id for e in dlq.list(flt)] == expected
    assert [e.id for e in dlq.entries(**words)] == [e.id for e in dlq.entries(flt)] == expected
    assert dlq.stats(**words).depth == dlq.stats(flt).depth == 1
    out = io.StringIO()
    assert dlq.export_jsonl(out, **words) == 1
    assert json.loads(out.getvalue())["id"] == entries["bad"].id
    assert [r.id for r in dlq.requeue(dry_run=True, **words)] == expected
    assert dlq.purge(dry_run=True, **words) == expected
    assert dlq.purge(flt) == expected


def test_stats_of_a_selection_count_only_its_entries(fleet: Fleet, entries: dict[str, DeadLetter]) -> None:
    everything = fleet.dlq.stats()
    chosen = fleet.dlq.stats(category="bad_request")
    assert everything.depth == 4
    assert (chosen.depth, chosen.by_category) == (2, {"bad_request": 2})
    assert chosen.oldest_age_s is not None and chosen.oldest_age_s >= 86400
    assert sum(fp.count for fp in chosen.top_fingerprints) == 2


def test_a_dry_run_purge_deletes_nothing(fleet: Fleet, entries: dict[str, DeadLetter]) -> None:
    planned = fleet.dlq.purge(everything=True, dry_run=True)
    assert sorted(planned) == sorted(e.id for e in entries.values())
    assert fleet.dlq.stats().depth == 4


def test_selecting_by_ids_and_filter_words_at_once_is_refused(
    fleet: Fleet, entries: dict[str, DeadLetter]
) -> None:
    with pytest.raises(ConfigError, match="not several at once"):
        fleet.dlq.purge([entries["bad"].id], category="bad_request")
    assert fleet.dlq.stats().depth == 4


def test_since_text_that_is_not_a_time_names_the_accepted_forms(fleet: Fleet) -> None:
    with pytest.raises(ConfigError, match="30m, 6h or 2d"):
        fleet.dlq.list(since="yesterday")


def test_a_parent_category_selects_every_leaf_under_it(fleet: Fleet, entries: dict[str, DeadLetter]) -> None:
    poison = dead_item(fleet, category="poison")
    permanent = {e.id for e in fleet.dlq.list(category="permanent")}
    assert permanent == {entries["old_bad"].id, entries["bad"].id, poison.id}
    transient = {e.id for e in fleet.dlq.list(category="transient")}
    assert transient == {entries["vendor_a"].id, entries["vendor_b"].id}
    assert fleet.dlq.stats(category="permanent").depth == 3
    planned = fleet.dlq.requeue(category="permanent", dry_run=True)
    assert {r.id for r in planned} == permanent


def test_an_unknown_category_is_refused_naming_the_known_ones(
    fleet: Fleet, entries: dict[str, DeadLetter]
) -> None:
    with pytest.raises(
        ConfigError, match=r"'nonsense' is no dead-letter category.*permanent, transient.*bad_request"
    ):
        fleet.dlq.requeue(category="nonsense", dry_run=True)
    with pytest.raises(ConfigError, match="nonsense"):
        fleet.dlq.list(category="nonsense")
    assert fleet.dlq.stats().depth == 4


def test_a_downstream_matches_its_provider_its_model_and_the_host_serving_it(
    redis_url: str, key_prefix: str
) -> None:
    settings = load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        queues={"agents": f"q-{key_prefix}"},
        llm={"base_url": "http://127.0.0.1:9/v1"},
    )
    fleet = Fleet(settings)
    haiku = dead_item(fleet, downstream="anthropic:claude-haiku-4-5")
    sonnet = dead_item(fleet, downstream="anthropic:claude-sonnet-4-5")
    gpt = dead_item(fleet, downstream="openai:gpt-4o-mini")
    page = dead_item(fleet, downstream="vendor-b.example")
    both = {haiku.id, sonnet.id}
    for word in ("anthropic", "Anthropic", "api.anthropic.com", "127.0.0.1"):
        assert {e.id for e in fleet.dlq.list(downstream=word)} == both, word
    assert [e.id for e in fleet.dlq.list(downstream="anthropic:claude-haiku-4-5")] == [haiku.id]
    assert [e.id for e in fleet.dlq.list(downstream="api.openai.com")] == [gpt.id]
    assert [e.id for e in fleet.dlq.list(downstream="vendor-b.example")] == [page.id]
    assert fleet.dlq.list(downstream="vendor-b") == []
    assert fleet.dlq.stats(downstream="anthropic").depth == 2


def test_a_requeue_for_one_vendor_skips_entries_its_api_never_saw(fleet: Fleet) -> None:
    failed = dead_item(fleet, downstream="anthropic:claude-haiku-4-5")
    invalid = dead_item(
        fleet, downstream="anthropic:claude-haiku-4-5", category="invalid_input", error_type="InvalidInput"
    )
    results = {r.id: r for r in fleet.dlq.requeue(downstream="anthropic")}
    assert results[failed.id].action == "requeued"
    assert results[invalid.id].action == "skipped"
    assert "never saw it" in (results[invalid.id].reason or "")
    assert fleet.dlq.store.get(invalid.id) is not None
    # Named by id or by category, the same entry is sent (the caller asked for it).
    [planned] = fleet.dlq.requeue([invalid.id], dry_run=True)
    assert planned.action == "would requeue"
