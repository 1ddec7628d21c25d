"""Evidence of failure with a real worker: a task writes a screenshot, a log and a junit report
into its workspace and fails for good; its dead letter carries what matches its patterns, cut
at the caps, and nothing a link or a hostile name points at; the command line, the console and
the service's API hand them out safely; they go when the entry goes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import evidence_test_tasks as et
import pytest
import redis
from fault_support import wait_until
from starlette.testclient import TestClient
from typer.testing import CliRunner
from worker_env import cluster_env, own_queues

from agentfleet import LocalCluster
from agentfleet.cli.app import app as cli_app
from agentfleet.config import Settings, load_settings
from agentfleet.dlq import DeadLetter
from agentfleet.errors import DeadLetterNotFound
from agentfleet.orchestration import Fleet
from agentfleet.service import create_app

pytestmark = pytest.mark.slow

TOKEN = "evidence-" + "0123456789abcdef" * 2
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FILE_CAP = 4096
PATTERNS = "**/*.png,*.log,reports/*.xml"
HOSTILE = "_img_src_x_onerror_alert_1__.log"


@pytest.fixture(scope="module")
def settings(redis_url: str) -> Settings:
    prefix = f"ev{uuid.uuid4().hex[:8]}"
    return load_settings(
        broker_url=redis_url,
        key_prefix=prefix,
        queues=own_queues(prefix),
        service={"token": TOKEN},
        dlq={"artifact_patterns": PATTERNS.split(","), "artifact_max_bytes": FILE_CAP},
    )


@pytest.fixture(scope="module")
def cluster(settings: Settings) -> Iterator[LocalCluster]:
    env = cluster_env(
        AGENTFLEET_TASK_MODULES="evidence_test_tasks",
        AGENTFLEET_DLQ__ARTIFACT_PATTERNS=PATTERNS,
        AGENTFLEET_DLQ__ARTIFACT_MAX_BYTES=str(FILE_CAP),
    )
    with LocalCluster(
        workers=1, concurrency=2, pool="prefork", broker_url=settings.broker_url, env=env, settings=settings
    ) as running:
        yield running


@pytest.fixture(scope="module")
def fleet(cluster: LocalCluster) -> Fleet:
    return cluster.fleet()


@pytest.fixture(scope="module")
def entry(fleet: Fleet) -> DeadLetter:
    run = fleet.map(et.leave_evidence, [{"log_lines": 2000}])
    assert run.wait(timeout_s=120).dead_lettered == 1
    [found] = fleet.dlq.list(run_id=run.id)
    return found


@pytest.fixture(scope="module")
def client(settings: Settings, cluster: LocalCluster) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _cli(settings: Settings, *args: str) -> object:
    env = {"AGENTFLEET_BROKER_URL": settings.broker_url or "", "AGENTFLEET_KEY_PREFIX": settings.key_prefix}
    return CliRunner().invoke(cli_app, list(args), env=env)


def test_the_dead_letter_carries_the_matching_files_cut_at_the_cap(
    fleet: Fleet, entry: DeadLetter, redis_url: str
) -> None:
    kept = {a.name: a for a in entry.artifacts}
    assert sorted(kept) == sorted(["screens/fail.png", "run.log", "reports/junit.xml", HOSTILE])
    assert kept["screens/fail.png"].content_type == "image/png"
    assert fleet.dlq.artifact(entry.id, "screens/fail.png")[1] == et.png()
    log = kept["run.log"]
    assert (log.truncated, log.size_bytes) == (True, FILE_CAP) and log.original_bytes > FILE_CAP
    assert fleet.dlq.artifact(entry.id, "run.log")[1].endswith(et.FINAL_LINE)
    assert b"testsuite" in fleet.dlq.artifact(entry.id, "reports/junit.xml")[1]
    # The link to /etc/passwd was not followed, and nothing of it was kept anywhere.
    passwd = Path("/etc/passwd").read_bytes()[:64]
    assert all(passwd not in fleet.dlq.artifact(entry.id, name)[1] for name in kept)
    # The files were read before the execution removed its workspace (it goes once it ends).
    workspace = redis.Redis.from_url(redis_url).get(f"test:workspace:{entry.run_id}")
    assert workspace is not None
    wait_until(lambda: not Path(workspace.decode()).exists(), 30, "the workspace removed")


def test_a_sandboxed_task_keeps_what_its_own_patterns_name(fleet: Fleet) -> None:
    run = fleet.map(et.sandboxed_failure, [{}])
    assert run.wait(timeout_s=120).dead_lettered == 1
    [found] = fleet.dlq.list(run_id=run.id)
    assert found.error.endswith("the sandboxed step failed"), found.error
    assert [a.name for a in found.artifacts] == ["out/result.txt"]
    assert fleet.dlq.artifact(found.id, "out/result.txt")[1] == b"partial result\n"


def test_the_command_line_lists_and_writes_them(
    settings: Settings, entry: DeadLetter, tmp_path: Path
) -> None:
    shown = _cli(settings, "dlq", "show", entry.id)
    assert shown.exit_code == 0, shown.output  # type: ignore[attr-defined]
    assert "screens/fail.png" in shown.output and "image/png" in shown.output  # type: ignore[attr-defined]
    target = tmp_path / "shot.png"
    wrote = _cli(settings, "dlq", "artifact", entry.id[:8], "screens/fail.png", "-o", str(target))
    assert wrote.exit_code == 0, wrote.output  # type: ignore[attr-defined]
    assert target.read_bytes() == et.png()
    target.write_bytes(b"mine")
    again = _cli(settings, "dlq", "artifact", entry.id, "screens/fail.png", "-o", str(target))
    assert again.exit_code != 0 and "give --force" in str(again.exception)  # type: ignore[attr-defined]
    assert target.read_bytes() == b"mine"
    forced = _cli(settings, "dlq", "artifact", entry.id, "screens/fail.png", "-o", str(target), "--force")
    assert forced.exit_code == 0 and target.read_bytes() == et.png()  # type: ignore[attr-defined]
    out = _cli(settings, "dlq", "artifact", entry.id, "run.log", "-o", "-")
    assert out.stdout_bytes.endswith(et.FINAL_LINE)  # type: ignore[attr-defined]
    missing = _cli(settings, "dlq", "artifact", entry.id, "passwd.log", "-o", "-")
    assert missing.exit_code != 0 and "no artifact 'passwd.log'" in str(missing.exception)  # type: ignore[attr-defined]


def test_the_console_shows_the_image_inline_and_offers_the_log(client: TestClient, entry: DeadLetter) -> None:
    page = client.get(f"/console/dlq/{entry.id}", headers=AUTH)
    assert page.status_code == 200
    assert f'<img src="/console/dlq/{entry.id}/artifacts/screens/fail.png"' in page.text
    assert f'href="/console/dlq/{entry.id}/artifacts/run.log" download' in page.text
    image = client.get(f"/console/dlq/{entry.id}/artifacts/screens/fail.png", headers=AUTH)
    assert image.status_code == 200 and image.content == et.png()
    assert image.headers["content-type"] == "image/png"
    assert image.headers["x-content-type-options"] == "nosniff"
    assert image.headers["content-disposition"].startswith("inline")
    assert "default-src 'none'" in image.headers["content-security-policy"]
    log = client.get(f"/console/dlq/{entry.id}/artifacts/run.log", headers=AUTH)
    assert log.headers["content-type"].startswith("text/plain")
    assert log.headers["content-disposition"] == 'attachment; filename="run.log"'
    hostile = client.get(f"/console/dlq/{entry.id}/artifacts/{HOSTILE}", headers=AUTH)
    assert hostile.headers["content-disposition"] == f'attachment; filename="{HOSTILE}"'
    unsigned = client.get(f"/console/dlq/{entry.id}/artifacts/screens/fail.png", follow_redirects=False)
    assert unsigned.status_code == 303 and "/login" in unsigned.headers["location"]


def test_the_service_api_serves_them_behind_its_token(client: TestClient, entry: DeadLetter) -> None:
    assert client.get(f"/dlq/{entry.id}/artifacts").status_code == 401
    listed = client.get(f"/dlq/{entry.id}/artifacts", headers=AUTH)
    assert listed.status_code == 200
    assert {a["name"] for a in listed.json()["artifacts"]} == {a.name for a in entry.artifacts}
    xml = client.get(f"/dlq/{entry.id}/artifacts/reports/junit.xml", headers=AUTH)
    assert xml.status_code == 200 and xml.headers["content-disposition"].startswith("attachment")
    assert client.get(f"/dlq/{entry.id}/artifacts/nope.log", headers=AUTH).status_code == 404
    assert client.get("/dlq/ffffffffffffffff/artifacts", headers=AUTH).status_code == 404


def test_they_go_when_the_entry_goes(fleet: Fleet, settings: Settings, redis_url: str) -> None:
    run = fleet.map(et.leave_evidence, [{"log_lines": 10}])
    assert run.wait(timeout_s=120).dead_lettered == 1
    [found] = fleet.dlq.list(run_id=run.id)
    key = fleet.dlq.store.keys.artifacts(found.id)
    client = redis.Redis.from_url(redis_url)
    assert client.exists(key)
    assert fleet.dlq.purge([found.id]) == [found.id]
    assert not client.exists(key)
    with pytest.raises(DeadLetterNotFound):
        fleet.dlq.artifact(found.id, "run.log")


def test_a_requeued_item_that_fails_again_carries_its_new_attempts_artifacts(fleet: Fleet) -> None:
    run = fleet.map(et.leave_evidence, [{"log_lines": 3, "note": False}])
    assert run.wait(timeout_s=120).dead_lettered == 1
    [first] = fleet.dlq.list(run_id=run.id)
    [sent] = fleet.dlq.requeue([first.id])
    assert sent.action == "requeued", sent.reason

    def failed_again() -> bool:
        entry = fleet.dlq.store.get(first.id)
        return entry is not None and entry.requeues == 1

    wait_until(failed_again, 120, "the requeued item's new dead letter")
    again = fleet.dlq.get(first.id)
    assert sorted(a.name for a in again.artifacts) == sorted(a.name for a in first.artifacts)
    assert fleet.dlq.artifact(first.id, "run.log")[1].endswith(et.FINAL_LINE)
