"""The console's banner and new pages on a real Redis, without workers.

What is wrong is made so for real (a downstream paused through the limiter, a circuit opened
through the breaker, spend recorded in the ledger, heartbeats written to the registry) and
the banner must say it on every page an operator reads, and on none before signing in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from agentfleet.config import Settings, load_settings
from agentfleet.models import TaskOutcome
from agentfleet.ratelimit import Limiter
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.registry import TaskInfo, WorkerRecord, WorkerRegistry
from agentfleet.runs import AttemptSpan, RunStore
from agentfleet.service import create_app
from agentfleet.spend import SpendLedger

TOKEN = "trouble-token-" + "0" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "sk-live-very-secret-value"
VENDOR = "vendor-a.example"
PAGES = ["/runs", "/workers", "/dlq", "/limits", "/schedules", "/spend"]


@pytest.fixture
def settings(redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("VENDOR_TOKEN", SECRET)
    return load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        queues={"agents": f"{key_prefix}.a", "fanin": f"{key_prefix}.f", "maintenance": f"{key_prefix}.m"},
        service={"token": TOKEN},
        credentials={"vendor": {"env": "VENDOR_TOKEN", "domains": [VENDOR]}},
        budgets={"fleet_daily_usd": 10.0, "run_usd": 4.0, "alert_at": 0.8},
        dlq={"vendor_issue_failures": 2, "circuit_cooldown_s": 60},
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def _banner(html: str) -> list[str]:
    found = re.search(
        r'<section class="trouble[^"]*" aria-labelledby="trouble-title">(.*?)</section>', html, re.S
    )
    if not found:
        return []
    return [
        re.sub(r"<[^>]+>", "", item).strip()
        for item in re.findall(r"<li[^>]*>(.*?)</li>", found.group(1), re.S)
    ]


def _worker(settings: Settings, node: str = "w1@host", **load: object) -> WorkerRecord:
    record = WorkerRecord(
        node=node, queues=(settings.queues.agents,), tasks={"t.echo": TaskInfo(fleet=True)}, pid=4242, **load
    )
    WorkerRegistry.from_settings(settings).beat(record)
    return record


def test_with_no_worker_every_page_says_so_first(client: TestClient) -> None:
    for path in PAGES:
        page = client.get(f"/console{path}", headers=AUTH)
        assert page.status_code == 200, path
        assert _banner(page.text)[0] == "No worker is running: none has a live heartbeat.", path
    assert "trouble" not in client.get("/console/login").text, "nothing is told before signing in"


def test_a_paused_downstream_is_named_with_the_time_it_has_left(
    client: TestClient, settings: Settings
) -> None:
    _worker(settings)
    Limiter.from_settings(settings).pause(VENDOR, 42)
    lines = _banner(client.get("/console/runs", headers=AUTH).text)
    assert len(lines) == 1 and lines[0].startswith(f"{VENDOR} is paused for every worker for 4")
    assert 'href="/console/limits"' in client.get("/console/workers", headers=AUTH).text


def test_an_open_circuit_is_bad_news_on_every_page(client: TestClient, settings: Settings) -> None:
    _worker(settings)
    breaker = CircuitBreaker.from_settings(settings)
    breaker.record_failure(VENDOR)
    breaker.record_failure(VENDOR)
    page = client.get("/console/spend", headers=AUTH).text
    assert _banner(page) == [f"The circuit of {VENDOR} is open: its calls fail at once."]
    assert "trouble-bad" in page


def test_budgets_past_their_alert_share_and_spent_ones_are_told_apart(
    client: TestClient, settings: Settings
) -> None:
    _worker(settings)
    ledger = SpendLedger.from_settings(settings)
    ledger.record("r0", "anthropic:claude-haiku-4-5", 8.5)
    assert _banner(client.get("/console/runs", headers=AUTH).text) == [
        "The fleet has spent $8.50 of its $10.00 daily budget (85%)"
    ]
    ledger.record("r0", "anthropic:claude-haiku-4-5", 2.0)
    assert _banner(client.get("/console/runs", headers=AUTH).text) == [
        "The fleet has spent $10.50 of its $10.00 daily budget: its calls stop until midnight UTC"
    ]


def test_a_running_run_near_its_budget_is_named_redacted(client: TestClient, settings: Settings) -> None:
    _worker(settings)
    store = RunStore.from_settings(settings)
    store.create_run(
        "a1b2c3d4e5f60718",
        name=f"nightly <b>{SECRET}</b>",
        kind="map",
        task="t.echo",
        items=[("x", "k", "0")],
    )
    SpendLedger.from_settings(settings).record("a1b2c3d4e5f60718", "anthropic:claude-haiku-4-5", 3.6)
    page = client.get("/console/workers", headers=AUTH).text
    assert SECRET not in page and "<b>" not in page
    assert "Run nightly &lt;b&gt;[REDACTED]&lt;/b&gt; has spent 90% of its budget" in page


def test_the_workers_page_shows_each_workers_load_and_unknown_for_older_ones(
    client: TestClient, settings: Settings
) -> None:
    _worker(
        settings,
        "new@host",
        host="box-1",
        pool="gevent",
        slots=200,
        busy=150,
        rss_bytes=300 * 2**20,
        version="9.9",
    )
    _worker(settings, "old@host")
    page = client.get("/console/workers", headers=AUTH).text
    new = page[page.index("new@host") : page.index("old@host")]
    assert "150 of 200 slots busy" in new and "150 / 50" in new
    assert all(text in new for text in ("gevent", "box-1", "9.9", "300.0 MiB"))
    old = page[page.index("old@host") :]
    assert (
        'data-label="Memory" class="num">-</td>' in old
        and 'data-label="Slots busy / free" class="num">-</td>' in old
    )
    assert "150 of 200" in page and "No worker is running" not in page


def test_a_timeline_shows_keys_and_worker_names_escaped(client: TestClient, settings: Settings) -> None:
    _worker(settings)
    store = RunStore.from_settings(settings)
    run_id = "0a1b2c3d4e5f6a7b"
    key = f"<img src=x onerror=alert(1)>\u202e{SECRET}"
    store.create_run(
        run_id, name="keys", kind="map", task="t.echo", items=[(f"{run_id}-0", f"{run_id}:0:ab", key)]
    )
    outcome = TaskOutcome(
        task_id=f"{run_id}-0", run_id=run_id, item_key=key, ok=True, index=0, idempotency_key=f"{run_id}:0:ab"
    )
    store.finish(outcome, span=AttemptSpan("<script>w</script>@host", 0.5))
    page = client.get(f"/console/runs/{run_id}/timeline", headers=AUTH)
    assert page.status_code == 200
    assert "<img" not in page.text and "<script>" not in page.text and "\u202e" not in page.text
    assert SECRET not in page.text and "&lt;script&gt;w&lt;/script&gt;@host" in page.text
    assert "\\u202e[REDACTED]" in page.text


def test_a_run_recorded_without_a_timeline_is_still_listed_in_full(
    client: TestClient, settings: Settings
) -> None:
    """Outcomes from workers that kept no timeline (older ones) are read from the event stream."""
    store = RunStore.from_settings(settings)
    run_id = "00ff00ff00ff00ff"
    items = [(f"{run_id}-{i}", f"{run_id}:{i}:ab", str(i)) for i in range(3)]
    store.create_run(run_id, name="old", kind="map", task="t.echo", items=items)
    for i, item in enumerate(items):
        body = TaskOutcome(
            task_id=item[0], run_id=run_id, item_key=str(i), ok=i != 1, index=i, idempotency_key=item[1]
        )
        store.finish(body)
    store.client.delete(store.run_key(run_id, "spans"))
    page = client.get(f"/console/runs/{run_id}?show=failed", headers=AUTH).text
    assert page.count('<tr id="item-') == 1 and 'id="item-1"' in page
    assert "finished, 1 failed" in page


@pytest.mark.parametrize("path", ["/workers", "/runs/0123456789abcdef/timeline"])
def test_new_pages_need_signing_in(client: TestClient, path: str) -> None:
    response = client.get(f"/console{path}", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].startswith("/console/login")


def test_an_unknown_runs_timeline_is_a_404(client: TestClient) -> None:
    assert client.get("/console/runs/ffffffffffffffff/timeline", headers=AUTH).status_code == 404


def test_stopping_a_running_runs_reload_keeps_the_view_it_was_on(
    client: TestClient, settings: Settings
) -> None:
    store = RunStore.from_settings(settings)
    run_id = "0f0f0f0f0f0f0f0f"
    items = [(f"{run_id}-{i}", f"{run_id}:{i}:ab", str(i)) for i in range(2)]
    store.create_run(run_id, name="moving", kind="map", task="t.echo", items=items)
    page = client.get(f"/console/runs/{run_id}?show=pending&page=1", headers=AUTH).text
    assert '<meta http-equiv="refresh"' in page
    assert f'href="/console/runs/{run_id}?show=pending&amp;page=1&amp;refresh=0">Stop reloading' in page
    still = client.get(f"/console/runs/{run_id}?show=pending&page=1&refresh=0", headers=AUTH).text
    assert '<meta http-equiv="refresh"' not in still and "Stop reloading" not in still


def test_a_finished_runs_drawn_timeline_and_charts_follow_a_requeue(
    client: TestClient, settings: Settings
) -> None:
    """What is drawn from a timeline is kept between views, and drawn again once it grows."""
    store = RunStore.from_settings(settings)
    run_id = "0e0e0e0e0e0e0e0e"
    items = [(f"{run_id}-{i}", f"{run_id}:{i}:ab", str(i)) for i in range(2)]
    store.create_run(run_id, name="again", kind="map", task="t.echo", items=items)
    for i, item in enumerate(items):
        outcome = TaskOutcome(
            task_id=item[0], run_id=run_id, item_key=str(i), ok=i == 0, index=i, idempotency_key=item[1]
        )
        store.finish(outcome, span=AttemptSpan("w1@host", 0.2))
    for _ in range(2):
        timeline = client.get(f"/console/runs/{run_id}/timeline", headers=AUTH).text
        assert "2 attempts (1 succeeded, 1 failed)" in timeline
        assert "Items finished a second: peak 2" in client.get(f"/console/runs/{run_id}", headers=AUTH).text
    store.reopen(run_id, 1, items[1][1], was_ok=False, was_dead=False)
    again = TaskOutcome(
        task_id=items[1][0], run_id=run_id, item_key="1", ok=True, index=1, idempotency_key=items[1][1]
    )
    store.finish(again, span=AttemptSpan("w2@host", 0.2))
    timeline = client.get(f"/console/runs/{run_id}/timeline", headers=AUTH).text
    assert "2 attempts (1 succeeded, 1 failed)" in timeline and "1 attempts (1 succeeded)" in timeline
    assert "w2@host" in timeline
