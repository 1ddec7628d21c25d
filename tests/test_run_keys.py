"""The run store's key names: what one script touches shares one Redis Cluster slot."""

from __future__ import annotations

import fakeredis
import pytest
from redis.crc import key_slot

from agentfleet.idempotency import default_item_key, stage_key
from agentfleet.keys import RUN_PARTS, RunKeys, item_tag
from agentfleet.runs.delivery import DeliveryScripts

RUN = "0123456789abcdef"
keys = RunKeys("af")


def _slot(name: str) -> int:
    return key_slot(name.encode())


def test_an_item_with_a_default_key_lives_in_its_runs_slot() -> None:
    key = default_item_key(RUN, 7, {"text": "hello"})
    names = [
        keys.run(RUN),
        keys.run(RUN, "done"),
        keys.item("out", key),
        keys.item("claim", key),
        keys.deliveries(key, f"{RUN}-7"),
    ]
    assert len({_slot(n) for n in names}) == 1
    assert keys.same_slot(RUN, key)


def test_every_pipeline_stage_of_a_default_key_stays_in_the_runs_slot() -> None:
    key = default_item_key(RUN, 3, {"a": 1})
    assert {_slot(keys.item("out", stage_key(key, s, 3))) for s in range(3)} == {_slot(keys.run(RUN))}


def test_a_given_key_keeps_its_outcome_and_claim_together_across_runs() -> None:
    names = [
        keys.item("out", "invoice-42"),
        keys.item("claim", "invoice-42"),
        keys.item("errs", "invoice-42"),
    ]
    assert len({_slot(n) for n in names}) == 1
    assert item_tag("invoice-42") == "invoice-42"
    assert not keys.same_slot(RUN, "invoice-42")


def test_distinct_outcomes_get_distinct_names() -> None:
    first, second = default_item_key(RUN, 1, {"a": 1}), default_item_key(RUN, 2, {"a": 1})
    assert keys.item("out", first) != keys.item("out", second)
    assert keys.item("out", "a:b") != keys.item("out", "a:c")


def test_fleet_wide_keys_carry_no_tag() -> None:
    for name in (keys.runs, keys.active, keys.stats, keys.done_bucket(1)):
        assert "{" not in name


def test_a_runs_names_at_once_match_each_built_alone_and_a_delivery_keeps_only_the_last() -> None:
    named = RunKeys("af")
    assert named.parts(RUN) == {"": named.run(RUN), **{part: named.run(RUN, part) for part in RUN_PARTS}}
    scripts = DeliveryScripts(fakeredis.FakeRedis(), named, ttl_s=60, clustered=False)
    assert scripts._run_names(RUN) is scripts._run_names(RUN)
    for n in range(3000):
        scripts._run_names(f"{n:016x}")
        scripts._item_names(f"{n:016x}:0:ab", "t")
    assert len(scripts._runs) <= 1024 and len(scripts._names) <= 1024
    assert scripts._run_names(f"{2999:016x}")["done"] == named.run(f"{2999:016x}", "done")
    item, kinds = f"{RUN}:7:ab", ("out", "deliv", "claim", "mem")
    assert scripts._item_names(item, "t-1") == named.items(item, *kinds, task_id="t-1")


def test_an_items_names_at_once_match_each_built_alone() -> None:
    for key in (default_item_key(RUN, 7, {"a": 1}), "invoice-42", stage_key("invoice-42", 1, 3)):
        assert keys.items(key, "out", "deliv", "claim", "mem", task_id="t-1") == [
            keys.item("out", key),
            keys.deliveries(key, "t-1"),
            keys.item("claim", key),
            keys.item("mem", key),
        ]
    assert keys.items(f"{RUN}:7:ab", "out", "deliv", task_id="t-1") == [
        f"af:out:{{{RUN}}}:7:ab",
        f"af:deliv:{{{RUN}}}:7:ab:t-1",
    ]
    assert keys.items("invoice-42#s1", "claim") == ["af:claim:{invoice-42}#s1"]
    with pytest.raises(ValueError, match="ITEM_KINDS"):
        keys.items("invoice-42", "out", "nope")
