"""``Tool(..., requires_approval=True)`` on real workers, the model being the mock Messages API
over real HTTP: the agent parks before the tool call, and the decision resumes it at that
call (approved as asked, approved with edited arguments, rejected with a comment). The
webhook announces each approval with its signed link.

The oracles are the far ends: the scripted server's ``/deploy`` hits (what the tool did) and
``/hook`` hits (what the webhook sent), and the mock model's reply, which repeats the tool
results it was sent.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from durable_support import durable_cluster
from fault_support import wait_until
from http_scripted import Reply, ScriptedServer

from agentfleet import LocalCluster
from agentfleet.approvals import Approval
from agentfleet.approvals.links import valid
from agentfleet.config import load_settings
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.orchestration import Fleet, Run

pytestmark = pytest.mark.slow

SECRET = "link-" + "0123456789abcdef" * 2
KEY = "sk-live-" + "a1b2c3d4" * 4


@pytest.fixture(scope="module")
def mock() -> Iterator[MockMessagesServer]:
    with MockMessagesServer() as server:
        yield server


@pytest.fixture(scope="module")
def far() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


@pytest.fixture(scope="module")
def cluster(redis_url: str, mock: MockMessagesServer, far: ScriptedServer) -> Iterator[LocalCluster]:
    with durable_cluster(
        redis_url,
        mock,
        far,
        AGENTFLEET_TASK_MODULES="approval_agent_tasks",
        AGENTFLEET_APPROVALS__WEBHOOK_URL=far.url("/hook"),
        AGENTFLEET_APPROVALS__LINK_SECRET=SECRET,
        AGENTFLEET_SERVICE__PUBLIC_URL="https://fleet.example",
    ) as running:
        yield running


@pytest.fixture
def fleet(cluster: LocalCluster, far: ScriptedServer) -> Fleet:
    far.script("/deploy", Reply(200, {"ok": True}))
    far.script("/lookup", Reply(200, {"ok": True}))
    far.script("/hook", Reply(200, {"ok": True}))
    return cluster.fleet()


def _start(fleet: Fleet, directive: str) -> tuple[Run, str]:
    marker = uuid.uuid4().hex[:8]
    run = fleet.map("approval_agent_tasks.release_agent", [{"prompt": f"{directive}\nrelease {marker}"}])
    return run, marker


def _parked(fleet: Fleet, run: Run, n: int = 1) -> Approval:
    """The ``n``-th approval of ``run``, once it is pending."""
    wait_until(
        lambda: (
            len(fleet.approvals(run=run.id, status=None)) >= n
            and fleet.approvals(run=run.id, status="pending")
        ),
        90,
        f"approval {n} of the agent",
    )
    (waiting,) = fleet.approvals(run=run.id, status="pending")
    return waiting


def _deploys(far: ScriptedServer, run: Run, path: str = "/deploy") -> list[dict[str, Any]]:
    return [h.json() for h in far.hits(path) if h.headers.get("idempotency-key", "").startswith(run.id)]


def _result(run: Run) -> dict[str, Any]:
    summary = run.wait(timeout_s=90)
    assert summary.succeeded == 1, summary
    (outcome,) = run.outcomes()
    return outcome.result


def test_the_agent_waits_for_approval_before_the_tool_and_resumes_at_that_call(
    fleet: Fleet, far: ScriptedServer
) -> None:
    run, _ = _start(fleet, f'CALL deploy {{"version": "v2", "api_key": "{KEY}"}}')
    asked = _parked(fleet, run)
    assert asked.name is not None and asked.name.startswith("tool:deploy#toolu_")
    assert asked.details["tool"] == "deploy" and asked.details["arguments"]["version"] == "v2"
    assert KEY not in str(asked.details), "the arguments are shown redacted"
    assert _deploys(far, run) == [], "the tool waits for the decision"
    assert run.summary().waiting_approval == 1
    fleet.approve(asked.id, by="alice")
    result = _result(run)
    assert _deploys(far, run) == [{"version": "v2", "api_key": KEY}]
    assert "deploy: " in result["text"] and '"deployed": "v2"' in result["text"]

    # The webhook told of it (from a thread of the worker's own: waited for), with a link that
    # decides exactly this approval.
    def posted() -> list[dict[str, Any]]:
        return [h.json() for h in far.hits("/hook") if asked.id in h.json()["text"]]

    wait_until(lambda: len(posted()) >= 1, 60, "the approval's webhook")
    (hook,) = posted()
    assert KEY not in hook["text"]
    link = next(w for w in hook["text"].split("<")[1:] if w.startswith("https://fleet.example/"))
    url = urlsplit(link.split("|")[0])
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    settings = load_settings(approvals={"link_secret": SECRET})
    assert url.path == f"/approvals/{asked.id}/decide"
    assert valid(settings, asked.id, query["expires"], query["sig"]) is None


def test_approved_with_edited_arguments_the_tool_runs_with_the_edit(
    fleet: Fleet, far: ScriptedServer
) -> None:
    run, _ = _start(fleet, 'CALL deploy {"version": "v2"}')
    fleet.approve(_parked(fleet, run).id, by="bob", data={"version": "v2.1"})
    _result(run)
    assert _deploys(far, run) == [{"version": "v2.1"}]


def test_an_edit_that_breaks_the_schema_does_not_run_and_the_model_is_told(
    fleet: Fleet, far: ScriptedServer
) -> None:
    run, _ = _start(fleet, 'CALL deploy {"version": "v2"}')
    fleet.approve(_parked(fleet, run).id, by="bob", data={"version": 3})
    result = _result(run)
    assert _deploys(far, run) == []
    assert "deploy failed: " in result["text"] and "do not match the tool's schema" in result["text"]
    assert result["tool_calls"][0]["is_error"] is True


def test_a_rejection_reaches_the_model_as_the_tools_result_with_the_comment(
    fleet: Fleet, far: ScriptedServer
) -> None:
    run, _ = _start(fleet, 'CALL deploy {"version": "v9"}')
    fleet.reject(_parked(fleet, run).id, by="carol", comment="change freeze this week")
    result = _result(run)
    assert _deploys(far, run) == []
    assert "deploy failed: The call to deploy was rejected by carol" in result["text"]
    assert "change freeze this week" in result["text"]


def test_each_call_of_a_gated_tool_is_its_own_approval_across_resumes(
    fleet: Fleet, far: ScriptedServer
) -> None:
    run, _ = _start(fleet, "CHAIN deploy, lookup, deploy")
    first = _parked(fleet, run, 1)
    fleet.approve(first.id, by="dan")
    second = _parked(fleet, run, 2)
    assert second.id != first.id and second.details["tool_use_id"] != first.details["tool_use_id"]
    assert len(_deploys(far, run)) == 1, "the second call waits for its own decision"
    fleet.reject(second.id, by="dan", comment="one is enough")
    result = _result(run)
    assert len(_deploys(far, run)) == 1
    assert [c["name"] for c in result["tool_calls"]] == ["deploy", "lookup", "deploy"]
    assert [c["is_error"] for c in result["tool_calls"]] == [False, False, True]


def test_a_tool_run_beside_a_parked_one_in_the_same_turn_is_not_run_again_on_resume(
    fleet: Fleet, far: ScriptedServer
) -> None:
    run, _ = _start(fleet, "USE TOOLS deploy, lookup")
    asked = _parked(fleet, run)
    wait_until(lambda: len(_deploys(far, run, "/lookup")) == 1, 90, "the ungated tool to run")
    fleet.approve(asked.id, by="erin")
    result = _result(run)
    assert len(_deploys(far, run)) == 1 and len(_deploys(far, run, "/lookup")) == 1
    assert [c["name"] for c in result["tool_calls"]] == ["deploy", "lookup"]
    assert "deploy: " in result["text"] and "lookup: " in result["text"]
