"""Idempotency keys are stable across processes and runs, and differ where they must."""

from __future__ import annotations

import subprocess
import sys

from agentfleet.idempotency import default_item_key, stable_hash, stage_key


def test_the_hash_ignores_key_order() -> None:
    assert stable_hash({"a": 1, "b": [1, 2]}) == stable_hash({"b": [1, 2], "a": 1})


def test_the_hash_is_the_same_in_another_process_with_another_hash_seed() -> None:
    code = "from agentfleet.idempotency import stable_hash; print(stable_hash({'text': 'héllo', 'n': 3}))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outs == {stable_hash({"text": "héllo", "n": 3})}


def test_default_keys_differ_by_run_index_and_input() -> None:
    base = default_item_key("run1", 0, {"x": 1})
    assert base == default_item_key("run1", 0, {"x": 1})
    assert (
        len(
            {
                base,
                default_item_key("run2", 0, {"x": 1}),
                default_item_key("run1", 1, {"x": 1}),
                default_item_key("run1", 0, {"x": 2}),
            }
        )
        == 4
    )


def test_pipeline_stages_have_their_own_keys_and_the_last_uses_the_item_key() -> None:
    assert stage_key("k", 0, 3) == "k#s0"
    assert stage_key("k", 1, 3) == "k#s1"
    assert stage_key("k", 2, 3) == "k"
