"""The Lua loader: script files beside their package, the shared library, EVALSHA and NOSCRIPT."""

from __future__ import annotations

from importlib import resources

import pytest
import redis

from agentfleet.access.throttle import ACCESS_LUA
from agentfleet.approvals.store import APPROVAL_LUA
from agentfleet.dlq.store import DLQ_LUA
from agentfleet.lua import ScriptSet, shared_library
from agentfleet.ratelimit.circuit import CIRCUIT_LUA
from agentfleet.ratelimit.scripts import LIMITER_LUA
from agentfleet.runs.budgets import SPEND_LUA
from agentfleet.runs.delivery import DELIVERY_LUA
from agentfleet.runs.store import RUNS_LUA
from agentfleet.transport.intake import TRANSPORT_LUA

SETS = [
    LIMITER_LUA,
    CIRCUIT_LUA,
    DLQ_LUA,
    RUNS_LUA,
    TRANSPORT_LUA,
    ACCESS_LUA,
    DELIVERY_LUA,
    SPEND_LUA,
    APPROVAL_LUA,
]


def _script_names(scripts: ScriptSet) -> list[str]:
    folder = resources.files(scripts.package) / scripts.folder
    names = [f.name.removesuffix(".lua") for f in folder.iterdir() if f.name.endswith(".lua")]
    return sorted(name for name in names if name not in scripts.libraries)


@pytest.mark.parametrize("scripts", SETS, ids=lambda s: f"{s.package}/{s.folder}")
def test_every_script_of_every_set_compiles_on_redis(scripts: ScriptSet, redis_client: redis.Redis) -> None:
    names = _script_names(scripts)
    assert names, f"no scripts found in {scripts.package}/{scripts.folder}"
    for name in names:
        sha = redis_client.script_load(scripts.source(name))
        assert redis_client.script_exists(sha) == [True]


def test_a_script_is_sent_with_the_shared_library_then_its_libraries_in_front() -> None:
    source = CIRCUIT_LUA.source("record")
    shared, library, script = (
        source.index("local function now_s"),
        source.index("local function window_sums"),
        source.index("local kind, window, nb"),
    )
    assert shared < library < script


def test_a_script_is_sent_with_only_the_helpers_it_uses(redis_client: redis.Redis) -> None:
    # begin.lua names claim_item and nothing else of the delivery helpers; finish.lua needs
    # record_outcome, which needs end_run and add_span in turn.
    begin, finish = DELIVERY_LUA.source("begin"), DELIVERY_LUA.source("finish")
    assert "local function claim_item" in begin
    for name in ("settle_item", "record_outcome", "add_span", "now_ms"):
        assert f"local function {name}" not in begin
    for name in ("settle_item", "record_outcome", "end_run", "add_span", "now_ms_text", "now_ms"):
        assert f"local function {name}" in finish
    assert "local function claim_item" not in finish
    # Top-level statements of a library stay whatever the script uses.
    assert "local dims = " in DLQ_LUA.source("add")
    assert shared_library().splitlines()[0] in begin


def test_a_registered_script_runs_again_after_redis_forgot_it(
    redis_client: redis.Redis, key_prefix: str
) -> None:
    release = CIRCUIT_LUA.register(redis_client, "release")["release"]
    key = f"{key_prefix}:cb:x"
    redis_client.hset(key, "state", "half_open")
    assert release(keys=[key]) == 1
    redis_client.script_flush()
    redis_client.hset(key, "probe_until", "9")
    assert release(keys=[key]) == 1
    assert redis_client.hget(key, "probe_until") == "0"


def test_a_missing_script_file_fails_at_registration(redis_client: redis.Redis) -> None:
    with pytest.raises(FileNotFoundError):
        CIRCUIT_LUA.register(redis_client, "no_such_script")
