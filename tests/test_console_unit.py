"""The console without workers: sign-in, CSRF, what pages show and never show, purge and preview."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from dlq_samples import register_worker, sample_entry
from starlette.testclient import TestClient

from agentfleet.config import Settings, load_settings
from agentfleet.dlq import DLQStore
from agentfleet.models import TaskOutcome
from agentfleet.runs import AttemptSpan, RunStore
from agentfleet.service import create_app
from agentfleet.spend import SpendLedger

TOKEN = "console-token-123-" + "0" * 32
SECRET = "sk-live-very-secret-value"
HOST = "http://testserver"


@pytest.fixture
def settings(redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("VENDOR_TOKEN", SECRET)
    return load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        service={"token": TOKEN},
        credentials={"vendor": {"env": "VENDOR_TOKEN", "domains": ["vendor-a.example"]}},
        schedules={"nightly": {"task": "tests.fetch", "cron": "0 6 * * *", "inputs": [{"n": 1}]}},
        budgets={"run_usd": 4.0},
        limits={"vendor-a.example": {"rate_per_s": 5, "max_concurrency": 2}},
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), base_url=HOST) as test_client:
        yield test_client


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


def _sign_in(client: TestClient) -> None:
    form = client.get("/console/login")
    response = client.post(
        "/console/login",
        data={"csrf": _csrf(form.text), "token": TOKEN, "next": "/console/dlq"},
        headers={"Origin": HOST},
        follow_redirects=False,
    )
    assert response.status_code == 303 and response.headers["location"] == "/console/dlq"


def _store(settings: Settings) -> DLQStore:
    return DLQStore.from_settings(settings)


def test_pages_redirect_to_sign_in_until_the_token_is_given(client: TestClient) -> None:
    response = client.get("/console/runs", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"].startswith("/console/login?next=%2Fconsole%2Fruns")


def test_a_wrong_token_does_not_sign_in(client: TestClient) -> None:
    form = client.get("/console/login")
    response = client.post(
        "/console/login", data={"csrf": _csrf(form.text), "token": "wrong"}, headers={"Origin": HOST}
    )
    assert response.status_code == 401 and "not the service token" in response.text
    assert client.get("/console/runs", follow_redirects=False).status_code == 303


def test_sign_in_without_its_csrf_value_is_refused(client: TestClient) -> None:
    client.get("/console/login")
    response = client.post(
        "/console/login", data={"csrf": "forged", "token": TOKEN}, headers={"Origin": HOST}
    )
    assert response.status_code == 403


def test_the_session_cookie_is_httponly_and_same_site_strict(client: TestClient) -> None:
    form = client.get("/console/login")
    response = client.post(
        "/console/login",
        data={"csrf": _csrf(form.text), "token": TOKEN},
        headers={"Origin": HOST},
        follow_redirects=False,
    )
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/console" in cookie


def test_sign_in_never_redirects_off_the_console(client: TestClient) -> None:
    form = client.get("/console/login")
    response = client.post(
        "/console/login",
        data={"csrf": _csrf(form.text), "token": TOKEN, "next": "//evil.example/x"},
        headers={"Origin": HOST},
        follow_redirects=False,
    )
    assert response.headers["location"] == "/console/runs"


def test_the_console_is_off_without_a_service_token(redis_url: str, key_prefix: str) -> None:
    settings = load_settings(broker_url=redis_url, key_prefix=key_prefix)
    with TestClient(create_app(settings)) as client:
        response = client.get("/console/runs")
    assert response.status_code == 403 and "AGENTFLEET_SERVICE__TOKEN" in response.text


def test_a_bearer_token_reads_pages_without_a_session(client: TestClient) -> None:
    response = client.get("/console/runs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200 and "<h1>Runs</h1>" in response.text


def test_an_action_without_the_sessions_csrf_token_changes_nothing(
    client: TestClient, settings: Settings
) -> None:
    entry = sample_entry()
    _store(settings).add(entry)
    _sign_in(client)
    response = client.post(
        "/console/dlq/purge", data={"id": entry.id, "confirm": "yes", "csrf": "x"}, headers={"Origin": HOST}
    )
    assert response.status_code == 403
    assert _store(settings).get(entry.id) is not None


def test_an_action_from_another_origin_changes_nothing(client: TestClient, settings: Settings) -> None:
    entry = sample_entry()
    _store(settings).add(entry)
    _sign_in(client)
    csrf = _csrf(client.get(f"/console/dlq/purge?id={entry.id}").text)
    response = client.post(
        "/console/dlq/purge",
        data={"id": entry.id, "confirm": "yes", "csrf": csrf},
        headers={"Origin": "https://evil.example"},
    )
    assert response.status_code == 403
    assert _store(settings).get(entry.id) is not None


def test_purge_needs_the_confirmation_box(client: TestClient, settings: Settings) -> None:
    entry = sample_entry()
    _store(settings).add(entry)
    _sign_in(client)
    csrf = _csrf(client.get(f"/console/dlq/purge?id={entry.id}").text)
    unconfirmed = client.post(
        "/console/dlq/purge", data={"id": entry.id, "csrf": csrf}, headers={"Origin": HOST}
    )
    assert unconfirmed.status_code == 422 and _store(settings).get(entry.id) is not None
    confirmed = client.post(
        "/console/dlq/purge", data={"id": entry.id, "csrf": csrf, "confirm": "yes"}, headers={"Origin": HOST}
    )
    assert confirmed.status_code == 200 and "1 entry deleted" in confirmed.text
    assert _store(settings).get(entry.id) is None


def test_bulk_purge_by_fingerprint_lists_exactly_the_matching_entries(
    client: TestClient, settings: Settings
) -> None:
    timeouts = [sample_entry(error="read timeout after 30 s", error_type="Timeout") for _ in range(3)]
    other = sample_entry(error="HTTP 400 from vendor-a.example", error_type="BadRequest")
    for entry in [*timeouts, other]:
        _store(settings).add(entry)
    _sign_in(client)
    page = client.get(f"/console/dlq/purge?fingerprint={timeouts[0].fingerprint}").text
    listed = set(re.findall(r'name="id" value="([^"]+)"', page))
    assert listed == {e.id for e in timeouts}


def test_a_requeue_preview_sends_nothing(client: TestClient, settings: Settings) -> None:
    entry = sample_entry()
    _store(settings).add(entry)
    register_worker(_store(settings).client, settings.key_prefix, settings.queues.agents)
    _sign_in(client)
    page = client.get(f"/console/dlq/requeue?id={entry.id}")
    assert page.status_code == 200 and "would requeue" in page.text
    assert _store(settings).get(entry.id) is not None


def test_an_entry_page_shows_no_secret(client: TestClient, settings: Settings) -> None:
    entry = sample_entry(
        inputs={"url": "https://vendor-a.example/x", "note": f"key {SECRET}"},
        error=f"403 with Authorization: Bearer {SECRET}",
        traceback=f'Traceback...\n  headers={{"authorization": "{SECRET}"}}\n',
    )
    _store(settings).add(entry)
    _sign_in(client)
    page = client.get(f"/console/dlq/{entry.id}")
    assert page.status_code == 200 and "[REDACTED]" in page.text
    assert SECRET not in page.text and TOKEN not in page.text


def test_pages_forbid_scripts_and_framing(client: TestClient) -> None:
    _sign_in(client)
    headers = client.get("/console/runs").headers
    assert "script-src" not in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]


def test_every_page_renders_with_labelled_landmarks(client: TestClient, settings: Settings) -> None:
    store = RunStore.from_settings(settings)
    store.create_run("r1", name="pricing", kind="map", task="tests.fetch", items=[("r1-0", "k0", "0")])
    SpendLedger.from_settings(settings).record("r1", "anthropic:claude-haiku-4-5", 1.0)
    entry = sample_entry(run_id="r1")
    _store(settings).add(entry)
    _sign_in(client)
    store.finish(
        TaskOutcome(task_id="r1-0", run_id="r1", item_key="0", ok=True, index=0, idempotency_key="k0"),
        span=AttemptSpan("w1@host", 0.2),
    )
    register_worker(store.client, settings.key_prefix, settings.queues.agents)
    pages = ["/runs", "/runs/r1", "/runs/r1/timeline", "/workers", "/dlq", f"/dlq/{entry.id}", "/limits"]
    for path in [*pages, "/schedules", "/spend"]:
        page = client.get(f"/console{path}")
        assert page.status_code == 200, path
        assert '<main id="main"' in page.text and 'nav aria-label="Console"' in page.text, path
        assert "<th scope=" in page.text, path
    assert "nightly" in client.get("/console/schedules").text
    assert "25.0%" in client.get("/console/spend").text, "a quarter of the run budget"


def test_a_bad_age_filter_is_one_clear_error(client: TestClient) -> None:
    _sign_in(client)
    response = client.get("/console/dlq?since=yesterdayish")
    assert response.status_code == 422 and "use a duration such as 30m" in response.text
