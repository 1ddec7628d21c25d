"""The key registry: every name agentfleet writes is built in ``agentfleet/keys.py``, spelled
as it always was (data already in a user's Redis is found again), listed in ``KEYS`` and in
docs/keys.md, and built nowhere else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from redis.crc import key_slot

from agentfleet.keys import (
    KEYS,
    AccessKeys,
    ApprovalKeys,
    CircuitKeys,
    DeadLetterKeys,
    KeyPattern,
    LimiterKeys,
    RunKeys,
    SpendKeys,
    WorkerKeys,
    audit_key,
    firing_key,
    queue_head_key,
    redbeat_prefix,
)

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "agentfleet"
RUN = "0123456789abcdef"
ITEM = f"{RUN}:3:9f86d081"
runs, limiter, circuits = RunKeys("af"), LimiterKeys("af"), CircuitKeys("af")
dlq, spend, workers, access = DeadLetterKeys("af"), SpendKeys("af"), WorkerKeys("af"), AccessKeys("af")
approvals = ApprovalKeys("af")

# (name as built, the name it has always had, its row of KEYS)
PINNED = [
    (runs.run(RUN), "af:run:{0123456789abcdef}", "p:run:{<id>}"),
    (runs.run(RUN, "items"), "af:run:{0123456789abcdef}:items", "p:run:{<id>}:items"),
    (runs.run(RUN, "inputs"), "af:run:{0123456789abcdef}:inputs", "p:run:{<id>}:inputs"),
    (runs.run(RUN, "done"), "af:run:{0123456789abcdef}:done", "p:run:{<id>}:done"),
    (runs.run(RUN, "recorded"), "af:run:{0123456789abcdef}:recorded", "p:run:{<id>}:recorded"),
    (runs.run(RUN, "events"), "af:run:{0123456789abcdef}:events", "p:run:{<id>}:events"),
    (runs.run(RUN, "suspect"), "af:run:{0123456789abcdef}:suspect", "p:run:{<id>}:suspect"),
    (runs.run(RUN, "counted"), "af:run:{0123456789abcdef}:counted", "p:run:{<id>}:counted"),
    (runs.run(RUN, "spans"), "af:run:{0123456789abcdef}:spans", "p:run:{<id>}:spans"),
    (runs.run(RUN, "lanes"), "af:run:{0123456789abcdef}:lanes", "p:run:{<id>}:lanes"),
    (runs.run(RUN, "undo"), "af:run:{0123456789abcdef}:undo", "p:run:{<id>}:undo"),
    (runs.run(RUN, "undo:data"), "af:run:{0123456789abcdef}:undo:data", "p:run:{<id>}:undo:data"),
    (runs.run(RUN, "undo:state"), "af:run:{0123456789abcdef}:undo:state", "p:run:{<id>}:undo:state"),
    (runs.item("out", ITEM), "af:out:{0123456789abcdef}:3:9f86d081", "p:out:{<tag>}..."),
    (runs.item("out", f"{ITEM}#s1"), "af:out:{0123456789abcdef}:3:9f86d081#s1", "p:out:{<tag>}..."),
    (runs.item("out", "invoice-42"), "af:out:{invoice-42}", "p:out:{<tag>}..."),
    (runs.item("out", "invoice-42#s2"), "af:out:{invoice-42}#s2", "p:out:{<tag>}..."),
    (runs.item("claim", ITEM), "af:claim:{0123456789abcdef}:3:9f86d081", "p:claim:{<tag>}..."),
    (runs.item("claim", "reconciler"), "af:claim:{reconciler}", "p:claim:{<tag>}..."),
    (runs.item("claim", f"comp:{RUN}"), "af:claim:{comp:0123456789abcdef}", "p:claim:{<tag>}..."),
    (runs.item("mem", ITEM), "af:mem:{0123456789abcdef}:3:9f86d081", "p:mem:{<tag>}..."),
    (runs.item("errs", ITEM), "af:errs:{0123456789abcdef}:3:9f86d081", "p:errs:{<tag>}..."),
    (runs.item("graph", ITEM), "af:graph:{0123456789abcdef}:3:9f86d081", "p:graph:{<tag>}..."),
    (
        runs.deliveries(ITEM, f"{RUN}-3"),
        "af:deliv:{0123456789abcdef}:3:9f86d081:0123456789abcdef-3",
        "p:deliv:{<tag>}...:<task>",
    ),
    (
        runs.deliveries(ITEM, f"{RUN}-3") + ":node1.4242.a1b2",  # marked by the delivery scripts
        "af:deliv:{0123456789abcdef}:3:9f86d081:0123456789abcdef-3:node1.4242.a1b2",
        "p:deliv:{<tag>}...:<task>:<token>",
    ),
    (
        runs.deliveries(ITEM, f"{RUN}-3", handed_back="node1.4242.a1b2"),
        "af:deliv:{0123456789abcdef}:3:9f86d081:0123456789abcdef-3:back:node1.4242.a1b2",
        "p:deliv:{<tag>}...:<task>:back:<token>",
    ),
    (runs.runs, "af:runs", "p:runs"),
    (runs.active, "af:runs:active", "p:runs:active"),
    (runs.stats, "af:stats", "p:stats"),
    (runs.done_bucket(1700000000), "af:stats:done:1700000000", "p:stats:done:<second>"),
    (runs.minute(28333333), "af:stats:min:28333333", "p:stats:min:<minute>"),
    (limiter.registry, "{af:rl}:known", "{p:rl}:known"),
    (limiter.pause("api.example.com"), "{af:rl}:api.example.com:pause", "{p:rl}:<downstream>:pause"),
    (limiter.holders("api.example.com"), "{af:rl}:api.example.com:holders", "{p:rl}:<downstream>:holders"),
    (limiter.hold_time("api.example.com"), "{af:rl}:api.example.com:hold", "{p:rl}:<downstream>:hold"),
    (
        limiter.reclaimed("api.example.com"),
        "{af:rl}:api.example.com:reclaimed",
        "{p:rl}:<downstream>:reclaimed",
    ),
    (
        limiter.buckets("anthropic:claude-haiku-4-5", ["rpm", "itpm"]),
        "{af:rl}:anthropic:claude-haiku-4-5:buckets:rpm+itpm",
        "{p:rl}:<downstream>:buckets:<names>",
    ),
    (circuits.known, "{af:cb}:known", "{p:cb}:known"),
    (circuits.circuit("api.example.com"), "{af:cb}:api.example.com", "{p:cb}:<downstream>"),
    (circuits.window("api.example.com"), "{af:cb}:api.example.com:w", "{p:cb}:<downstream>:w"),
    (dlq.stream, "{af:dlq}:stream", "{p:dlq}:stream"),
    (dlq.entry("dl-1"), "{af:dlq}:e:dl-1", "{p:dlq}:e:<id>"),
    (dlq.artifacts("dl-1"), "{af:dlq}:a:dl-1", "{p:dlq}:a:<id>"),
    (
        dlq.index("category", "rate_limited"),
        "{af:dlq}:i:category:rate_limited",
        "{p:dlq}:i:<dimension>:<value?>",
    ),
    (dlq.index("run", ""), "{af:dlq}:i:run:", "{p:dlq}:i:<dimension>:<value?>"),  # an entry with no run
    (dlq.counts("downstream"), "{af:dlq}:n:downstream", "{p:dlq}:n:<dimension>"),
    (dlq.fingerprints, "{af:dlq}:fp", "{p:dlq}:fp"),
    (dlq.malformed, "{af:dlq}:malformed", "{p:dlq}:malformed"),
    (dlq.artifact_bytes, "{af:dlq}:abytes", "{p:dlq}:abytes"),
    (spend.run(RUN), "af:spend:run:{0123456789abcdef}", "p:spend:run:{<id>}"),
    (spend.budget(RUN), "af:spend:budget:{0123456789abcdef}", "p:spend:budget:{<id>}"),
    (spend.day("2026-01-31"), "af:spend:day:{af:spend:2026-01-31}", "p:spend:day:{p:spend:<date>}"),
    (
        spend.tenants("2026-01-31"),
        "af:spend:day:{af:spend:2026-01-31}:tenants",
        "p:spend:day:{p:spend:<date>}:tenants",
    ),
    (
        spend.alerts("2026-01-31"),
        "af:spend:day:{af:spend:2026-01-31}:alerts",
        "p:spend:day:{p:spend:<date>}:alerts",
    ),
    (workers.index, "{af:wk}:workers", "{p:wk}:workers"),
    (workers.record("celery@host-1"), "{af:wk}:worker:celery@host-1", "{p:wk}:worker:<node>"),
    (access.failures("10.0.0.7"), "{af:auth}:fail:10.0.0.7", "{p:auth}:fail:<client>"),
    (access.sessions, "{af:auth}:sessions", "{p:auth}:sessions"),
    (queue_head_key("af", "agents\x06\x163"), "af:queuehead:agents\x06\x163", "p:queuehead:<list>"),
    (audit_key("af"), "af:creds:audit", "p:creds:audit"),
    (firing_key("af", "5f0c"), "af:sched:5f0c", "p:sched:<firing>"),
    (approvals.all, "{af:ap}:all", "{p:ap}:all"),
    (approvals.pending, "{af:ap}:pending", "{p:ap}:pending"),
    (approvals.due, "{af:ap}:due", "{p:ap}:due"),
    (approvals.outbox, "{af:ap}:outbox", "{p:ap}:outbox"),
    (approvals.counts, "{af:ap}:counts", "{p:ap}:counts"),
    (approvals.record("ap_0f3a"), "{af:ap}:a:ap_0f3a", "{p:ap}:a:<id>"),
    (approvals.run(RUN), "{af:ap}:run:0123456789abcdef", "{p:ap}:run:<id>"),
    (approvals.event("ci:build-7"), "{af:ap}:ev:ci:build-7", "{p:ap}:ev:<key>"),
    (approvals.parked(RUN), "{af:ap}:parked:0123456789abcdef", "{p:ap}:parked:<id>"),
]
BY_PATTERN = {kind.pattern: kind for kind in KEYS}


@pytest.mark.parametrize(("built", "spelled", "pattern"), PINNED, ids=[p[1] for p in PINNED])
def test_every_name_is_spelled_as_it_always_was_and_matches_its_row(
    built: str, spelled: str, pattern: str
) -> None:
    assert built == spelled
    assert BY_PATTERN[pattern].matches(built, "af")


def test_every_row_of_the_table_is_a_name_the_registry_builds() -> None:
    assert {pattern for _, _, pattern in PINNED} == set(BY_PATTERN)
    assert len(BY_PATTERN) == len(KEYS), "each pattern is listed once"


def test_redbeats_prefix_is_under_the_fleets() -> None:
    assert redbeat_prefix("af") == "af:redbeat:"


def test_a_pattern_matches_under_its_own_prefix_only() -> None:
    record = BY_PATTERN["p:run:{<id>}"]
    assert record.matches("t1:run:{abc}", "t1")
    assert not record.matches("t2:run:{abc}", "t1")
    assert not record.matches("t1:run:{abc}:items", "t1")
    assert KeyPattern("p:spend:day:{p:spend:<date>}", "hash").matches("x:spend:day:{x:spend:d}", "x")


def test_a_variable_part_is_empty_only_where_the_table_says_it_may_be() -> None:
    assert not BY_PATTERN["{p:rl}:<downstream>:pause"].matches("{af:rl}::pause", "af")
    assert not BY_PATTERN["p:queuehead:<list>"].matches("af:queuehead:", "af")
    assert BY_PATTERN["{p:dlq}:i:<dimension>:<value?>"].matches("{af:dlq}:i:run:", "af")
    assert not BY_PATTERN["{p:dlq}:i:<dimension>:<value?>"].matches("{af:dlq}:i::x", "af")


def test_a_name_outside_the_registry_is_refused_where_it_would_be_built() -> None:
    with pytest.raises(ValueError, match="RUN_PARTS"):
        runs.run(RUN, "timeline")
    with pytest.raises(ValueError, match="ITEM_KINDS"):
        runs.item("notes", ITEM)


def _slots(*names: str) -> set[int]:
    return {key_slot(name.encode()) for name in names}


def test_what_one_script_touches_shares_one_cluster_slot() -> None:
    assert (
        len(_slots(limiter.registry, limiter.pause("a"), limiter.holders("b"), limiter.buckets("c", ["x"])))
        == 1
    )
    assert len(_slots(circuits.known, circuits.circuit("a"), circuits.window("a"))) == 1
    assert (
        len(
            _slots(
                dlq.stream, dlq.entry("1"), dlq.index("run", RUN), dlq.counts("category"), dlq.fingerprints
            )
        )
        == 1
    )
    assert len(_slots(spend.day("d"), spend.tenants("d"), spend.alerts("d"))) == 1
    assert len(_slots(runs.run(RUN), spend.run(RUN), spend.budget(RUN), runs.item("mem", ITEM))) == 1
    assert len(_slots(workers.index, workers.record("n"))) == 1
    assert len(_slots(access.sessions, access.failures("c"))) == 1


# The docs -------------------------------------------------------------------------------------


def _documented() -> set[tuple[str, str]]:
    text = (REPO / "docs" / "keys.md").read_text()
    section = text.split("\n## The keys\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    found = set()
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        found.add((cells[0].strip("`"), cells[1]))
    return found


def test_the_docs_table_lists_exactly_the_registrys_keys_and_types() -> None:
    assert _documented() == {(kind.pattern, kind.type) for kind in KEYS}


def test_every_writer_the_docs_table_names_exists() -> None:
    text = (REPO / "docs" / "keys.md").read_text()
    section = text.split("\n## The keys\n", 1)[1].split("\n## ", 1)[0]
    writers = [row.strip("|").split("|")[4] for row in section.splitlines() if row.startswith("| `")]
    named = {path for cell in writers for path in re.findall(r"`([\w/]+\.(?:py|lua))`", cell)}
    assert named, "the table names the modules that write each key"
    assert sorted(p for p in named if not (PACKAGE / p).is_file()) == []


# Built nowhere else ---------------------------------------------------------------------------

_WRITES = {
    "set", "setex", "psetex", "setnx", "getset", "getdel", "mset", "msetnx",
    "hset", "hsetnx", "hmset", "hincrby", "hincrbyfloat", "hdel",
    "incr", "incrby", "incrbyfloat", "decr", "decrby",
    "sadd", "srem", "smove", "zadd", "zrem", "zincrby", "zremrangebyscore", "zremrangebyrank",
    "xadd", "xdel", "xtrim", "lpush", "rpush", "lpop", "rpop", "lrem", "ltrim", "lset",
    "expire", "pexpire", "expireat", "pexpireat", "persist", "delete", "unlink", "rename",
}  # fmt: skip


def _sources() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "keys.py"]


def _literal_text(node: ast.AST) -> str | None:
    """The literal text of a string or f-string (formatted parts as ``{}``), else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def _writes_to_a_spelled_key(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _WRITES
        and bool(node.args)
        # Every key name has a ``:`` after the fleet's prefix; a span attribute
        # (``span.set("agentfleet.run.kind", ...)``) has none.
        and ":" in (_literal_text(node.args[0]) or "")
    )


def _raw_names(source: str, where: str) -> list[str]:
    """Where ``source`` spells a key name itself: an f-string joining a prefix to more name, a
    ``":..."`` glued on with ``+``, or a string given as the key of a Redis write."""
    found = []
    for node in ast.walk(ast.parse(source)):
        at = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.JoinedStr):
            exprs = [ast.unparse(v.value) for v in node.values if isinstance(v, ast.FormattedValue)]
            text = _literal_text(node) or ""
            if any("prefix" in e or e.endswith(".root") for e in exprs) and ":" in text:
                found.append(f"{at} {text!r}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            glued = _literal_text(node.right)
            if glued is not None and glued.startswith(":"):
                found.append(f"{at} + {glued!r}")
        elif _writes_to_a_spelled_key(node):
            assert isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            found.append(f"{at} {node.func.attr}({_literal_text(node.args[0])!r}, ...)")
    return found


def test_no_module_but_the_registry_spells_a_key_name() -> None:
    raw = [hit for path in _sources() for hit in _raw_names(path.read_text(), str(path.relative_to(REPO)))]
    assert raw == [], "build these names in agentfleet/keys.py:\n" + "\n".join(raw)


def test_the_check_sees_the_ways_a_name_is_spelled_by_hand() -> None:
    sample = (
        "def f(client, prefix, store, run_id):\n"
        "    client.set(f'{prefix}:sched:{run_id}', 1)\n"
        "    client.hincrby(store.run_key(run_id) + ':extra', 'n', 1)\n"
        "    client.sadd('af:runs:active', run_id)\n"
        "    client.get(store.run_key(run_id))\n"
    )
    assert sorted(_raw_names(sample, "m")) == [
        "m:2 '{}:sched:{}'",
        "m:2 set('{}:sched:{}', ...)",
        "m:3 + ':extra'",
        "m:4 sadd('af:runs:active', ...)",
    ]


def test_the_dead_letter_scripts_build_the_registrys_names() -> None:
    lua = "".join(p.read_text() for p in (PACKAGE / "dlq" / "scripts").glob("*.lua"))
    glued = set(re.findall(r"\bp \.\. '([^']*)'", lua))
    root = dlq.root
    built = {
        dlq.entry("ID").removeprefix(root).removesuffix("ID"),
        dlq.artifacts("ID").removeprefix(root).removesuffix("ID"),
        dlq.stream.removeprefix(root),
        dlq.index("DIM", "V").removeprefix(root).removesuffix("DIM:V"),
        dlq.counts("DIM").removeprefix(root).removesuffix("DIM"),
        dlq.fingerprints.removeprefix(root),
        dlq.artifact_bytes.removeprefix(root),
    }
    assert glued == built == {":e:", ":a:", ":stream", ":i:", ":n:", ":fp", ":abytes"}
    assert "dim .. ':' .. " in lua, "an index name joins its dimension and value with ':'"
