"""OpenTelemetry traces, end to end: a client process and a real worker export to a real OTLP
receiver (this process, on loopback); one trace per run, through retries, stages, requeues
and into the user's own service. And: off by default, importing nothing of the SDK."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from http_scripted import Reply, ScriptedServer
from otlp_receiver import STATUS_ERROR, OTLPReceiver, ReceivedSpan
from starlette.testclient import TestClient

from agentfleet import LocalCluster
from agentfleet.config import Settings, load_settings
from agentfleet.errors import ConfigError
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.redis_client import state_client
from agentfleet.runs import RunStore
from agentfleet.service import create_app
from agentfleet.tracing import TRACE_ID_FIELD, wanted

TESTS = os.path.dirname(os.path.abspath(__file__))

# The client's run ids by name, the settings of the cluster, the user's own service.
Traced = tuple[dict[str, str], Settings, ScriptedServer]


def test_traces_are_wanted_only_when_otel_variables_ask() -> None:
    assert not wanted({})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert wanted({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not wanted({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})


def test_off_by_default_nothing_of_the_sdk_is_imported() -> None:
    # redis-py imports the SDK's metrics when the SDK is installed: only tracing is ours to keep out.
    code = (
        "import sys, agentfleet.tracing as t\n"
        "import agentfleet.orchestration.dispatch, agentfleet.tasks.execution, agentfleet.tools.transport\n"
        "assert not t.enabled() and t.span('x') is t.NO_SPAN and t.run_fields() == {}\n"
        "ours = ('opentelemetry.sdk.trace', 'opentelemetry.exporter', 'agentfleet.tracing.sdk')\n"
        "loaded = [m for m in sys.modules if m.startswith(ours)]\n"
        "assert not loaded, loaded\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    with OTLPReceiver() as server:
        yield server


@pytest.fixture(scope="module")
def traced(redis_url: str, receiver: OTLPReceiver) -> Iterator[Traced]:
    """A worker and a client process, both tracing to ``receiver``; the client's run ids."""
    prefix = f"tt{uuid.uuid4().hex[:8]}"
    settings = load_settings(key_prefix=prefix, broker_url=redis_url)
    common = {
        "PYTHONPATH": TESTS,
        "AGENTFLEET_TASK_MODULES": "agent_test_tasks,trace_test_tasks",
        "AGENTFLEET_KEY_PREFIX": prefix,
        "AGENTFLEET_RETRY__BACKOFF_BASE_S": "0.1",
        "AGENTFLEET_RETRY__BACKOFF_CAP_S": "0.5",
        "AGENTFLEET_FETCH__ALLOW_PRIVATE_HOSTS": json.dumps(["127.0.0.1"]),
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    with MockMessagesServer() as mock, ScriptedServer() as service:
        common["AGENTFLEET_LLM__BASE_URL"] = mock.url
        # The agent's first model call is refused once: the item is retried in a new message.
        mock.script([{"status": 429, "retry_after_s": 0.2}])
        service.script("/orders", Reply(200, {"ok": True}))
        worker_env = {**common, "OTEL_SERVICE_NAME": "trace-worker"}
        with LocalCluster(
            workers=1, concurrency=4, pool="threads", broker_url=redis_url, env=worker_env, settings=settings
        ):
            client_env = {
                **os.environ,
                **common,
                "AGENTFLEET_BROKER_URL": redis_url,
                "OTEL_SERVICE_NAME": "trace-client",
            }
            done = subprocess.run(
                [sys.executable, os.path.join(TESTS, "trace_client.py"), service.url("/orders")],
                env=client_env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            runs = json.loads(done.stdout.strip().splitlines()[-1])
            yield runs, settings, service


pytestmark = pytest.mark.slow


def _trace_id(settings: Settings, run_id: str) -> str:
    record = RunStore.from_settings(settings, state_client(settings)).get_run(run_id)
    trace_id = record.get(TRACE_ID_FIELD, "")
    assert len(trace_id) == 32, f"the run's record keeps its trace id: {record}"
    return trace_id


def _named(spans: list[ReceivedSpan], prefix: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def _ancestors(span: ReceivedSpan, spans: list[ReceivedSpan]) -> list[str]:
    by_id = {s.span_id: s for s in spans}
    names, parent = [], by_id.get(span.parent_id)
    while parent is not None:
        names.append(parent.name)
        parent = by_id.get(parent.parent_id)
    return names


def test_an_agent_run_is_one_trace_through_its_retry_model_and_tool_calls(
    traced: Traced, receiver: OTLPReceiver
) -> None:
    runs, settings, _ = traced
    trace_id = _trace_id(settings, runs["agent"])

    def complete(spans: list[ReceivedSpan]) -> bool:
        chats = _named(spans, "chat ")
        return bool(_named(spans, "run ")) and len(chats) >= 3 and len(_named(spans, "item ")) >= 2

    spans = receiver.wait_for(complete, trace_id)
    (run,) = _named(spans, "run ")
    assert (run.service, run.name, run.attributes["agentfleet.run.id"]) == (
        "trace-client",
        "run traced-agent",
        runs["agent"],
    )
    items = _named(spans, "item ")
    assert {s.service for s in items} == {"trace-worker"}
    first, retried = sorted(items, key=lambda s: s.attributes["agentfleet.item.attempt"])
    assert first.parent_id == run.span_id, "the first delivery continues the run's span"
    assert first.attributes["agentfleet.outcome"] == "retry"
    assert retried.attributes["agentfleet.item.attempt"] == 1
    assert retried.attributes["agentfleet.outcome"] == "ok"
    assert first.name in _ancestors(retried, spans), "the retry's message carried the context"
    # Model calls: the 429, then the agent's two turns, each with the GenAI conventions.
    chats = _named(spans, "chat ")
    refused = [c for c in chats if c.status == STATUS_ERROR]
    assert len(refused) == 1
    answered = [c for c in chats if c.status != STATUS_ERROR]
    assert len(answered) == 2
    for chat in answered:
        attrs = chat.attributes
        assert attrs["gen_ai.system"] == "anthropic"
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] == "claude-haiku-4-5"
        assert attrs["gen_ai.usage.input_tokens"] > 0 and attrs["gen_ai.usage.output_tokens"] > 0
        assert attrs["agentfleet.cost_usd"] > 0
        assert "attempt 2" in _ancestors(chat, spans)
    (tool,) = _named(spans, "execute_tool ")
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    assert "attempt 2" in _ancestors(tool, spans), "the tool ran in a pool thread, in the attempt's span"
    posts = [s for s in spans if s.name == "POST"]
    assert len(posts) == 3 and all(s.parent_id in {c.span_id for c in chats} for s in posts)
    assert {s.attributes["http.response.status_code"] for s in posts} == {429, 200}
    assert not any("prompt" in str(s.attributes) or "CALL lookup" in str(s.attributes) for s in spans)


def test_a_pipeline_trace_crosses_stages_into_the_users_service(
    traced: Traced, receiver: OTLPReceiver
) -> None:
    runs, settings, service = traced
    trace_id = _trace_id(settings, runs["pipeline"])
    spans = receiver.wait_for(lambda s: len(_named(s, "item ")) >= 2 and bool(_named(s, "run ")), trace_id)
    stages = sorted(_named(spans, "item "), key=lambda s: s.attributes["agentfleet.item.stage"])
    assert [s.attributes["agentfleet.item.stage"] for s in stages] == [0, 1]
    assert stages[0].name in _ancestors(stages[1], spans), "the next stage continues the first"
    (get,) = [s for s in spans if s.name == "GET"]
    assert get.attributes["server.address"] == "127.0.0.1" and get.attributes["url.path"] == "/orders"
    (hit,) = service.hits("/orders")
    _version, carried_trace, carried_span, _ = hit.headers["traceparent"].split("-")
    assert (carried_trace, carried_span) == (trace_id, get.span_id), "the service can join the trace"


def test_a_requeued_item_continues_its_runs_trace(traced: Traced, receiver: OTLPReceiver) -> None:
    runs, settings, _ = traced
    trace_id = _trace_id(settings, runs["requeue"])
    spans = receiver.wait_for(lambda s: len(_named(s, "item ")) >= 2 and bool(_named(s, "requeue")), trace_id)
    (requeue,) = _named(spans, "requeue")
    assert requeue.service == "trace-client"
    again = [s for s in _named(spans, "item ") if s.attributes.get("agentfleet.item.requeues") == 1]
    assert len(again) == 1 and again[0].parent_id == requeue.span_id
    assert all(s.status == STATUS_ERROR for s in _named(spans, "item "))


def test_the_reconcilers_resend_continues_the_runs_trace(redis_url: str, receiver: OTLPReceiver) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": TESTS,
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "trace-reconciler",
    }
    script = os.path.join(TESTS, "trace_reconcile.py")
    tag = uuid.uuid4().hex[:8]
    done = subprocess.run(
        [sys.executable, script, redis_url, tag], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    settings = load_settings(key_prefix=f"tr{tag}", broker_url=redis_url)
    trace_id = _trace_id(settings, found["run"])
    spans = receiver.wait_for(lambda s: bool(_named(s, "resend item")) and bool(_named(s, "run ")), trace_id)
    (run,) = _named(spans, "run ")
    (resend,) = _named(spans, "resend item")
    assert resend.parent_id == run.span_id, "the resend continues the run's span from its record"
    assert len(found["recovered"]) == 1
    carried = {h["id"]: h["traceparent"].split("-")[1:3] for h in found["headers"]}
    (lost,) = found["recovered"]
    assert carried[lost] == [trace_id, resend.span_id], "the message sent again carries the resend's span"
    (kept,) = [ids for task_id, ids in carried.items() if task_id != lost]
    assert kept == [trace_id, run.span_id], "a stamped message carries the run's span"


def test_the_console_links_a_runs_items_to_their_trace(traced: Traced) -> None:
    runs, settings, _ = traced
    trace_id = _trace_id(settings, runs["agent"])
    token = "trace-console-token-" + "0" * 32
    linked = load_settings(
        key_prefix=settings.key_prefix,
        broker_url=settings.broker_url,
        service={"token": token, "trace_url": "http://jaeger.example/trace/{trace_id}"},
    )
    with TestClient(create_app(linked), base_url="http://testserver") as client:
        page = client.get(f"/console/runs/{runs['agent']}", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200
    link = f'href="http://jaeger.example/trace/{trace_id}"'
    # The run's summary, and its one item's row.
    assert page.text.count(link) == 2, page.text


def test_a_trace_url_without_its_trace_id_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\{trace_id\}"):
        load_settings(service={"trace_url": "http://jaeger.example/trace/"})
