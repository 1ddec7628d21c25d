"""Every run option on every surface: Python, a TOML fan-out, a CLI flag, an HTTP field, an MCP
argument. Each surface takes each option, and refuses each bad value with the option's one
rule (a real Redis, no workers: runs are recorded and sent, never executed).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

import agentfleet.orchestration.fleet as fleet_module
from agentfleet.cli import main
from agentfleet.cli.option_flags import flag
from agentfleet.config import RunOptionArgs, RunOptions, Settings, load_settings, reset_settings, run_options
from agentfleet.config.options import RULES
from agentfleet.errors import AgentfleetError
from agentfleet.orchestration import Fleet
from agentfleet.orchestration.graph import Node
from agentfleet.orchestration.named import start_named
from agentfleet.service import create_app
from agentfleet.service.mcp_server import FleetTools, build_server
from agentfleet.spend import SpendLedger

TOKEN = "opt-" + "0123456789abcdef" * 2
INPUTS = [{"n": n} for n in range(4)]
TASK = "t.echo"

# A value each surface can carry (a CLI flag carries text), and one that breaks the rule.
GOOD: dict[str, Any] = {
    "name": "nightly",
    "aggregate": "agentfleet.merge:concat",
    "stagger_s": 0.5,
    "fail_fast": True,
    "max_in_flight": 3,
    "tenant": "acme",
    "budget_usd": 2.0,
    "batch_size": 2,
    "priority": 7,
}
BAD: dict[str, Any] = {
    "name": 5,
    "aggregate": "not a function",
    "stagger_s": -1,
    "fail_fast": "maybe",
    "max_in_flight": 0,
    "tenant": "a b",
    "budget_usd": 0,
    "batch_size": 0,
    "priority": 10,
}
# A flag is text, or a switch: a number for a name, or "maybe" for a switch, cannot be said.
CLI_CANNOT_SAY = {"name", "fail_fast"}

Started = list[RunOptions]


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Started:
    """The options every run was started with, as ``Fleet`` resolved them."""
    seen: Started = []

    def spy(*args: Any, **kwargs: Any) -> RunOptions:
        chosen = run_options(*args, **kwargs)
        seen.append(chosen)
        return chosen

    monkeypatch.setattr(fleet_module, "run_options", spy)
    return seen


@pytest.fixture
def base(redis_url: str, key_prefix: str) -> dict[str, Any]:
    """The settings every surface shares, as ``load_settings`` arguments."""
    return {
        "broker_url": redis_url,
        "key_prefix": key_prefix,
        "queues": {"agents": f"{key_prefix}.a", "fanin": f"{key_prefix}.f", "maintenance": f"{key_prefix}.m"},
        "dispatch": {"require_workers": False},
        "service": {"token": TOKEN},
        "budgets": {"run_usd": 5.0},
    }


@pytest.fixture
def settings(base: dict[str, Any]) -> Settings:
    return load_settings(**base, fanouts={"f": {"task": TASK, "inputs": INPUTS}})


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as made:
        yield made


# The surfaces: each starts a run with ``option=value``, or raises with the error it shows. ---


def by_python(fleet: Fleet, option: str, value: Any) -> None:
    fleet.map(TASK, INPUTS, **{option: value})


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return json.dumps(value)


def by_toml(
    base: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str, value: Any
) -> None:
    config = tmp_path / "agentfleet.toml"
    config.write_text(
        f'[fanouts.f]\ntask = "{TASK}"\ninputs = [{{ n = 1 }}, {{ n = 2 }}, {{ n = 3 }}]\n'
        f"{option} = {_toml(value)}\n"
    )
    monkeypatch.setenv("AGENTFLEET_CONFIG", str(config))
    with Fleet(load_settings(**base)) as fleet:
        start_named(fleet, "f")


def by_cli(
    base: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
    option: str,
    value: Any,
) -> None:
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text("".join(json.dumps(item) + "\n" for item in INPUTS))
    for name, given in (("BROKER_URL", base["broker_url"]), ("KEY_PREFIX", base["key_prefix"])):
        monkeypatch.setenv(f"AGENTFLEET_{name}", given)
    for role, queue in base["queues"].items():
        monkeypatch.setenv(f"AGENTFLEET_QUEUES__{role.upper()}", queue)
    monkeypatch.setenv("AGENTFLEET_DISPATCH__REQUIRE_WORKERS", "false")
    said = flag(option) if value is True else f"{flag(option)}={value}"
    monkeypatch.setattr(sys, "argv", ["agentfleet", "run", TASK, "--inputs", str(inputs), "--no-wait", said])
    reset_settings()
    capsys.readouterr()
    with pytest.raises(SystemExit) as ended:
        main()
    if ended.value.code:
        raise AgentfleetError(capsys.readouterr().err.replace("\n", " "))


def by_http(settings: Settings, option: str, value: Any) -> None:
    with TestClient(create_app(settings)) as client:
        body = {"fanout": "f", "inputs": INPUTS, option: value}
        response = client.post("/runs", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
    if response.status_code != 202:
        raise AgentfleetError(response.json()["error"])


def by_mcp(fleet: Fleet, option: str, value: Any) -> None:
    server = build_server(FleetTools(fleet))

    async def call() -> Any:
        return await server.call_tool("fan_out_tasks", {"task": TASK, "inputs": INPUTS, option: value})

    try:
        anyio.run(call)
    except Exception as exc:
        raise AgentfleetError(str(exc)) from None


Surface = Callable[[str, Any], None]


@pytest.fixture
def surfaces(
    fleet: Fleet,
    settings: Settings,
    base: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> dict[str, Surface]:
    return {
        "python": lambda option, value: by_python(fleet, option, value),
        "toml": lambda option, value: by_toml(base, tmp_path, monkeypatch, option, value),
        "cli": lambda option, value: by_cli(base, tmp_path, monkeypatch, capsys, option, value),
        "http": lambda option, value: by_http(settings, option, value),
        "mcp": lambda option, value: by_mcp(fleet, option, value),
    }


SURFACES = ["python", "toml", "cli", "http", "mcp"]
GOOD_CASES = [(surface, option) for surface in SURFACES for option in GOOD]
BAD_CASES = [
    (surface, option)
    for surface in SURFACES
    for option in BAD
    if not (surface == "cli" and option in CLI_CANNOT_SAY)
]


def test_the_matrix_holds_every_run_option() -> None:
    assert list(GOOD) == list(BAD) == list(RunOptions.model_fields) == list(RULES)
    assert list(RunOptionArgs.__annotations__) == list(RunOptions.model_fields), "Fleet.map's **kwargs type"


@pytest.mark.parametrize(("surface", "option"), GOOD_CASES)
def test_every_surface_takes_every_run_option(
    surfaces: dict[str, Surface], started: Started, fleet: Fleet, surface: str, option: str
) -> None:
    surfaces[surface](option, GOOD[option])
    assert len(started) == 1, "one run started"
    assert getattr(started[0], option) == GOOD[option]
    assert len(fleet.runs()) == 1


@pytest.mark.parametrize(("surface", "option"), BAD_CASES)
def test_every_surface_refuses_a_bad_value_with_the_options_rule(
    surfaces: dict[str, Surface], started: Started, fleet: Fleet, surface: str, option: str
) -> None:
    with pytest.raises(AgentfleetError) as refused:
        surfaces[surface](option, BAD[option])
    said = str(refused.value)
    if surface == "toml":
        assert f"fanouts.f.{option}: {RULES[option]}" in said, said
    else:
        assert f"{option} {RULES[option]} (got " in said, said
    assert started == [] and fleet.runs() == [], "nothing was started"


def test_python_callers_give_the_options_as_keywords_an_object_or_both(fleet: Fleet) -> None:
    shared = RunOptions(tenant="acme", priority=2, max_in_flight=4)
    run = fleet.map(TASK, INPUTS, options=shared, priority=6, name="both")
    record = fleet.store.get_run(run.id)
    assert (record["name"], record["tenant"], record["priority"], record["max_in_flight"]) == (
        "both",
        "acme",
        "6",
        "4",
    )


def test_a_run_records_the_options_it_was_given(fleet: Fleet) -> None:
    run = fleet.map(TASK, INPUTS, **GOOD)
    record = fleet.store.get_run(run.id)
    assert {k: record[k] for k in ("name", "aggregate", "fail_fast", "max_in_flight", "tenant")} == {
        "name": "nightly",
        "aggregate": "agentfleet.merge:concat",
        "fail_fast": "1",
        "max_in_flight": "3",
        "tenant": "acme",
    }
    assert (record["batch_size"], record["priority"]) == ("2", "7")
    assert SpendLedger.from_settings(fleet.settings, fleet.store.client).standing(run.id)[1] == 2.0


def test_an_unknown_keyword_is_a_type_error_naming_the_closest_option(fleet: Fleet) -> None:
    with pytest.raises(TypeError, match="'budget'; did you mean budget_usd"):
        fleet.map(TASK, INPUTS, budget=2.0)  # type: ignore[call-arg]
    assert fleet.runs() == []


@pytest.mark.parametrize("kind", ["pipeline", "graph"])
def test_only_a_map_packs_items_in_batches(fleet: Fleet, kind: str) -> None:
    with pytest.raises(AgentfleetError, match="batch_size packs the items of a map"):
        if kind == "pipeline":
            fleet.pipeline([TASK, TASK], INPUTS, batch_size=2)
        else:
            fleet.graph([Node("a", TASK)], INPUTS, batch_size=2)
    assert fleet.runs() == []


def test_the_mcp_tool_schema_is_the_options_own(fleet: Fleet) -> None:
    server = build_server(FleetTools(fleet))
    tools = {tool.name: tool for tool in anyio.run(server.list_tools)}
    schema = tools["fan_out_tasks"].input_schema
    own = RunOptions.model_json_schema()["properties"]
    assert {name: schema["properties"][name] for name in own} == own
    assert schema["required"] == ["task", "inputs"]


def test_every_run_option_is_a_flag_of_agentfleet_run_with_its_description() -> None:
    import typer.main

    from agentfleet.cli.app import app

    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    helps = {opt: param.help for param in command.params for opt in param.opts}
    for option, field in RunOptions.model_fields.items():
        assert helps.get(flag(option)) == field.description, option


def test_the_docs_table_of_run_options_is_the_options_own() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "python.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `(--[\w-]+)` \| (.+?) \| (.+?) \|$", page, flags=re.MULTILINE)
    documented = {option: (said_flag, description, rule) for option, said_flag, description, rule in rows}
    assert documented == {
        option: (flag(option), field.description, RULES[option])
        for option, field in RunOptions.model_fields.items()
    }


# A caller over HTTP holds a token, not the operator's trust (as an MCP client). -----------


def _post(settings: Settings, body: dict[str, Any]) -> Any:
    with TestClient(create_app(settings)) as client:
        return client.post("/runs", json=body, headers={"Authorization": f"Bearer {TOKEN}"})


def test_an_http_caller_names_only_the_operators_aggregates(settings: Settings, fleet: Fleet) -> None:
    response = _post(settings, {"fanout": "f", "aggregate": "subprocess:run"})
    assert response.status_code == 422 and "not an allowed aggregate" in response.json()["error"]
    assert fleet.runs() == []


def test_an_http_caller_cannot_raise_the_operators_run_budget(settings: Settings, fleet: Fleet) -> None:
    response = _post(settings, {"fanout": "f", "budget_usd": 50})
    assert response.status_code == 422 and "at most 5 US dollars" in response.json()["error"]
    assert fleet.runs() == []


def test_a_fan_outs_own_options_hold_and_a_caller_may_set_others(base: dict[str, Any]) -> None:
    own = {"task": TASK, "inputs": INPUTS, "budget_usd": 20.0, "tenant": "ops", "priority": 1}
    settings = load_settings(**base, fanouts={"g": own})
    with Fleet(settings) as fleet:
        ledger = SpendLedger.from_settings(settings, fleet.store.client)
        as_written = _post(settings, {"fanout": "g"}).json()["run_id"]
        changed = _post(settings, {"fanout": "g", "priority": 8, "name": "urgent"}).json()["run_id"]
        records = {run_id: fleet.store.get_run(run_id) for run_id in (as_written, changed)}
        assert [(r["name"], r["tenant"], r["priority"]) for r in records.values()] == [
            ("g", "ops", "1"),
            ("urgent", "ops", "8"),
        ]
        assert ledger.standing(as_written)[1] == 20.0, "the operator's own budget, above the callers' cap"
