"""``run_agent`` in this process, on the real clients and transport, against the mock Messages API
over HTTP: tool calls, tool errors, the loop detector and every budget.

No worker is needed: the ``TaskContext`` is built here with the factories a worker uses, so the
limiter, the guard and the accounting are the real ones (on the session's Redis).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from http_scripted import Reply, ScriptedServer
from task_contexts import use_worker_settings, worker_context

from agentfleet.config import get_settings, reset_settings
from agentfleet.errors import BudgetExceeded, Deferred, LoopDetected, RateLimited
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.tasks.agent import Tool, run_agent
from agentfleet.tasks.context import TaskContext
from agentfleet.tasks.llm_tasks import BUILTIN_TOOLS

MODEL = "claude-haiku-4-5"
SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


@pytest.fixture
def make_ctx(
    mock: MockMessagesServer,
    redis_url: str,
    key_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[..., TaskContext]]:
    """A factory of contexts as a worker builds them, with the given budgets."""
    mock.reset()
    use_worker_settings(monkeypatch, redis_url=redis_url, key_prefix=key_prefix, llm_url=mock.url)
    made: list[TaskContext] = []

    def make(**budgets: Any) -> TaskContext:
        ctx = worker_context(f"task-{len(made)}", tmp_path, **budgets)
        made.append(ctx)
        return ctx

    yield make
    for ctx in made:
        ctx.close()


def _calls(mock: MockMessagesServer) -> int:
    return len([r for r in mock.requests if r.path == "/v1/messages"])


def _tool(name: str, fn: Callable[[TaskContext, dict[str, Any]], Any]) -> Tool:
    return Tool(name, f"The {name} tool.", SCHEMA, fn)


def _lookup(ctx: TaskContext, args: dict[str, Any]) -> dict[str, Any]:
    return {"q": args["q"], "answer": 42}


def test_a_tool_call_round_trip_is_accounted(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer
) -> None:
    ctx = make_ctx()
    result = run_agent(ctx, prompt='CALL lookup {"q": "life"}', tools=[_tool("lookup", _lookup)], model=MODEL)
    assert (result.turns, result.stop_reason) == (2, "end_turn")
    assert [(c.name, c.input, c.is_error) for c in result.tool_calls] == [("lookup", {"q": "life"}, False)]
    assert _calls(mock) == 2
    served = sum(r.input_tokens + r.output_tokens for r in mock.requests)
    assert ctx.input_tokens + ctx.output_tokens == served
    price = get_settings().llm.prices[MODEL]
    expected = sum(
        r.input_tokens * price.input_per_mtok + r.output_tokens * price.output_per_mtok for r in mock.requests
    )
    assert ctx.cost_usd == pytest.approx(expected / 1_000_000)


def test_a_failing_tool_becomes_an_error_result_not_a_crash(make_ctx: Callable[..., TaskContext]) -> None:
    def broken(ctx: TaskContext, args: dict[str, Any]) -> Any:
        raise ValueError("the index is corrupt")

    ctx = make_ctx()
    result = run_agent(ctx, prompt='CALL lookup {"q": "x"}', tools=[_tool("lookup", broken)], model=MODEL)
    assert result.stop_reason == "end_turn"
    assert [(c.name, c.is_error) for c in result.tool_calls] == [("lookup", True)]


def test_a_rate_limited_tool_waits_and_tries_again_instead_of_failing(
    make_ctx: Callable[..., TaskContext],
) -> None:
    tries: list[float] = []

    def throttled(ctx: TaskContext, args: dict[str, Any]) -> Any:
        tries.append(time.monotonic())
        if len(tries) == 1:
            raise Deferred(0.3, "no slot free", downstream="vendor-a.example")
        if len(tries) == 2:
            raise RateLimited("429", retry_after_s=0.2, downstream="vendor-a.example")
        return {"answer": 42}

    result = run_agent(
        make_ctx(), prompt='CALL lookup {"q": "x"}', tools=[_tool("lookup", throttled)], model=MODEL
    )
    assert [(c.name, c.is_error) for c in result.tool_calls] == [("lookup", False)]
    assert len(tries) == 3
    assert tries[1] - tries[0] >= 0.3 and tries[2] - tries[1] >= 0.2, "each wait was honoured"


def test_a_tool_waits_no_longer_than_agent_tool_wait_s(
    make_ctx: Callable[..., TaskContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTFLEET_AGENT__TOOL_WAIT_S", "0.5")
    reset_settings()

    def always_throttled(ctx: TaskContext, args: dict[str, Any]) -> Any:
        raise Deferred(5.0, "paused after a 429", downstream="vendor-a.example")

    started = time.monotonic()
    result = run_agent(
        make_ctx(), prompt='CALL lookup {"q": "x"}', tools=[_tool("lookup", always_throttled)], model=MODEL
    )
    assert time.monotonic() - started < 3.0, "a wait longer than the budget is not taken"
    assert [(c.name, c.is_error) for c in result.tool_calls] == [("lookup", True)]


def test_the_loop_detector_stops_identical_calls(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer
) -> None:
    ran: list[dict[str, Any]] = []
    tool = _tool("lookup", lambda ctx, args: ran.append(args) or "same again")
    with pytest.raises(LoopDetected, match="lookup with the same input 3 times"):
        run_agent(make_ctx(), prompt='LOOP lookup {"q": "again"}', tools=[tool], model=MODEL, loop_limit=3)
    assert _calls(mock) == 3
    assert len(ran) == 2, "the third identical call is stopped before it runs"


def test_max_turns_stops_an_agent_that_never_ends(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer
) -> None:
    tools = [_tool(name, _lookup) for name in ("a", "b", "c")]
    with pytest.raises(BudgetExceeded, match=r"max_turns \(2\)"):
        run_agent(make_ctx(), prompt="CHAIN a, b, c", tools=tools, model=MODEL, max_turns=2)
    assert _calls(mock) == 2


def test_a_dollar_budget_stops_the_agent_before_its_next_call(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer
) -> None:
    ctx = make_ctx(budget_usd=0.00001)
    prompt = "x" * 40_000 + '\nCALL lookup {"q": "x"}'  # 10 000 input tokens: $0.01
    with pytest.raises(BudgetExceeded, match=r"spent \$0\.01"):
        run_agent(ctx, prompt=prompt, tools=[_tool("lookup", _lookup)], model=MODEL)
    assert _calls(mock) == 1


def test_a_token_budget_stops_the_agent_before_its_next_call(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer
) -> None:
    ctx = make_ctx(budget_tokens=50)
    with pytest.raises(BudgetExceeded, match="-token budget"):
        run_agent(ctx, prompt='CALL lookup {"q": "x"}', tools=[_tool("lookup", _lookup)], model=MODEL)
    assert _calls(mock) == 1
    assert ctx.input_tokens + ctx.output_tokens >= 50


def test_a_wall_clock_budget_stops_the_agent_before_its_next_call(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer
) -> None:
    def slow(ctx: TaskContext, args: dict[str, Any]) -> str:
        time.sleep(0.6)
        return "late"

    ctx = make_ctx(budget_wall_s=0.5)
    with pytest.raises(BudgetExceeded, match=r"of a 0\.5 s budget"):
        run_agent(ctx, prompt='CALL lookup {"q": "x"}', tools=[_tool("lookup", slow)], model=MODEL)
    assert _calls(mock) == 1


def test_a_budget_crossed_inside_a_tool_stops_the_agent_at_the_tools_next_request(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS", '["127.0.0.1"]')
    reset_settings()

    def fetch_twice(ctx: TaskContext, args: dict[str, Any]) -> int:
        ctx.http.get(vendor.url("/page")).raise_for_status()
        time.sleep(budget_s + 0.2)  # the budget runs out between the two requests
        return ctx.http.get(vendor.url("/page")).status_code

    # Room for a cold first model call and request on a loaded machine before the budget ends.
    budget_s = 3.0
    ctx = make_ctx(budget_wall_s=budget_s)
    with ScriptedServer() as vendor:
        vendor.script("/page", Reply(200, {"ok": True}))
        with pytest.raises(BudgetExceeded):
            run_agent(ctx, prompt='CALL lookup {"q": "x"}', tools=[_tool("lookup", fetch_twice)], model=MODEL)
        assert len(vendor.hits("/page")) == 1, "the request after the budget ran out was never sent"
    assert _calls(mock) == 1


class _EchoAuthorization(BaseHTTPRequestHandler):
    """Answers every GET with the request's Authorization header as its body, as httpbin does."""

    def do_GET(self) -> None:
        body = json.dumps({"authorization": self.headers.get("Authorization", "")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


ECHO_SECRET = "echo-canary-7f3e9a1c"


@pytest.fixture
def echo_server(monkeypatch: pytest.MonkeyPatch, make_ctx: Callable[..., TaskContext]) -> Iterator[str]:
    """An echoing server on 127.0.0.1, and the ``echo`` credential allowed for it."""
    monkeypatch.setenv("ECHO_TOKEN", ECHO_SECRET)
    monkeypatch.setenv("AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS", '["127.0.0.1"]')
    monkeypatch.setenv(
        "AGENTFLEET_CREDENTIALS", json.dumps({"echo": {"env": "ECHO_TOKEN", "domains": ["127.0.0.1"]}})
    )
    reset_settings()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _EchoAuthorization)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def test_the_fetch_tool_puts_an_echoed_credential_back_as_its_placeholder(
    make_ctx: Callable[..., TaskContext], echo_server: str
) -> None:
    call = {"url": f"{echo_server}/headers", "headers": {"Authorization": "Bearer $CRED{echo}"}}
    output = BUILTIN_TOOLS["http_fetch"].fn(make_ctx(), call)
    assert json.loads(output["text"]) == {"authorization": "Bearer $CRED{echo}"}
    assert ECHO_SECRET not in json.dumps(output)


def test_an_echoed_credential_in_any_tools_output_never_reaches_the_model_or_the_result(
    make_ctx: Callable[..., TaskContext], echo_server: str
) -> None:
    def raw_echo(ctx: TaskContext, args: dict[str, Any]) -> str:
        return ctx.http.get(echo_server, headers={"Authorization": "Bearer $CRED{echo}"}).text

    result = run_agent(
        make_ctx(), prompt='CALL echo {"q": "x"}', tools=[_tool("echo", raw_echo)], model=MODEL
    )
    assert "Bearer $CRED{echo}" in result.text, "the model's summary quotes what the tool returned"
    assert ECHO_SECRET not in json.dumps(result.as_dict())


def test_the_run_budget_stops_every_item_once_the_run_has_spent_it(
    make_ctx: Callable[..., TaskContext], mock: MockMessagesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentfleet.runs import RunStore
    from agentfleet.spend import SpendLedger

    monkeypatch.setenv("AGENTFLEET_BUDGETS__RUN_USD", "0.0001")
    reset_settings()
    store = RunStore.from_settings(get_settings())
    store.create_run(
        "run", name="budgeted", kind="map", task="t", items=[("t0", "k0", "0"), ("t1", "k1", "1")]
    )
    first, second = make_ctx(), make_ctx()
    run_agent(first, prompt="LONG 40", model=MODEL, max_tokens=100)
    ledger = SpendLedger.from_settings(get_settings(), store.client)
    assert ledger.standing("run")[0] == pytest.approx(first.cost_usd)
    with pytest.raises(BudgetExceeded, match=r"budgets\.run_usd"):
        while True:  # each call spends more; the run's cap is crossed within a few
            run_agent(second, prompt="LONG 40", model=MODEL, max_tokens=100)
    assert store.get_run("run")["status"] == "failed", "items not yet started will not run"
    assert ledger.standing("run")[0] >= 0.0001
