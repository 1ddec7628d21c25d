"""The console in a real browser (Debian's chromium driven by Playwright) against a real cluster.

``agentfleet serve`` runs as its own process on the cluster's Redis. The operator signs in,
opens the runs page and a run, finds the run's dead letter, previews the requeue, sends it,
and sees the item succeed. Then, with a downstream paused, the banner, the workers page, a
run's charts and the timelines of a small run and of a 10,000-item run, at a laptop's and a
phone's width. With ``AGENTFLEET_SCREENSHOTS`` set to a directory (``make screenshots`` sets
``docs/img``), each page is saved there as a PNG for the docs.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from console_test_tasks import gate_key
from ops_support import BIN, ServiceProcess, http_status, wait_for
from playwright import sync_api
from worker_env import cluster_env

from agentfleet import LocalCluster
from agentfleet.config import load_settings
from agentfleet.embedded_redis import free_port
from agentfleet.mock_llm import MockMessagesServer
from agentfleet.ratelimit import Limiter

pytestmark = pytest.mark.slow


TOKEN = "browser-test-token-" + "0" * 32
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with MockMessagesServer() as mock:
        env = cluster_env(AGENTFLEET_TASK_MODULES="console_test_tasks", AGENTFLEET_LLM__BASE_URL=mock.url)
        with LocalCluster(workers=2, concurrency=4, env=env) as running:
            yield running


@pytest.fixture(scope="module")
def service(cluster: LocalCluster) -> Iterator[str]:
    """``agentfleet serve`` on a free port; its base URL."""
    port = free_port()
    env = {
        **cluster.worker_env(),
        "AGENTFLEET_SERVICE__TOKEN": TOKEN,
        "AGENTFLEET_BUDGETS__RUN_USD": "5",
    }
    log_dir = Path(tempfile.mkdtemp(prefix="agentfleet-console-"))
    proc = ServiceProcess("serve", [str(BIN / "agentfleet"), "serve", "--port", str(port)], env, log_dir)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: http_status(f"{url}/health") == 200, timeout_s=60, what="the service", processes=[proc]
        )
        yield url
    finally:
        proc.stop()
        shutil.rmtree(log_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sync_api.Page]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium package (see the README)")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=LAPTOP,
        )
        try:
            yield context.new_page()
        finally:
            context.close()


def _shot(page: sync_api.Page, name: str) -> None:
    target = os.environ.get("AGENTFLEET_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"{name}.png"), full_page=True)


def test_an_operator_requeues_a_dead_letter_and_sees_it_succeed(
    cluster: LocalCluster, service: str, page: sync_api.Page
) -> None:
    texts = ["I love it", "This is awful", "It is fine", "Great work"]
    llm = cluster.fleet().map("agentfleet.classify_sentiment", [{"text": t} for t in texts], name="sentiment")
    assert llm.wait(timeout_s=90).succeeded == 4
    gate = os.urandom(4).hex()
    inputs = [{"n": n, "gate": gate} for n in range(6)]
    run = cluster.fleet().map("console_test_tasks.gated", inputs, name="vendor-sync")
    summary = run.wait(timeout_s=90)
    assert (summary.succeeded, summary.dead_lettered) == (3, 3)

    page.goto(f"{service}/console/runs")
    page.get_by_label("Service token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{service}/console/runs")
    row = page.get_by_role("row").filter(has_text=run.id)
    assert "finished" in row.inner_text()
    _shot(page, "console-runs")

    row.get_by_role("link", name="vendor-sync").click()
    page.wait_for_url(f"{service}/console/runs/{run.id}")
    assert page.get_by_role("heading", level=1).inner_text().startswith("Run vendor-sync")
    assert "its gate" in page.get_by_role("region", name="Items").inner_text()
    _shot(page, "console-run")

    page.get_by_role("region", name="Summary").get_by_role("link", name="3", exact=True).click()
    page.wait_for_url(f"**/console/dlq?run={run.id}")
    _shot(page, "console-dlq")
    page.get_by_role("link", name="Requeue (preview first)…").click()
    assert page.get_by_text("Nothing has been sent yet").is_visible()
    assert page.get_by_role("cell", name="would requeue").count() == 3
    _shot(page, "console-requeue-preview")

    redis.Redis.from_url(cluster.broker_url).set(gate_key(gate), "open")
    page.get_by_role("button", name="Requeue 3 entries").click()
    assert page.get_by_role("status").inner_text().startswith("3 of 3 sent again")

    def finished() -> bool:
        page.goto(f"{service}/console/runs/{run.id}?refresh=0")
        text = page.get_by_role("region", name="Summary").inner_text()
        return "Succeeded\n6" in text and "finished" in text

    wait_for(finished, timeout_s=60, what="the requeued items to succeed in the console")
    _shot(page, "console-run-after-requeue")
    final = run.summary()
    assert (final.succeeded, final.dead_lettered, final.redelivered) == (6, 0, 3)
    page.goto(f"{service}/console/dlq?run={run.id}")
    assert page.get_by_text("No dead letters match these filters").is_visible()

    page.goto(f"{service}/console/spend")
    by_downstream = page.get_by_role("region", name="By downstream, over these 14 days").inner_text()
    assert "anthropic:claude-haiku-4-5" in by_downstream and "$0.0" in by_downstream
    _shot(page, "console-spend")


def _open(page: sync_api.Page, url: str) -> None:
    """Go to ``url``, signing in on the way if the session is not there yet."""
    page.goto(url)
    if "/console/login" in page.url:
        page.get_by_label("Service token").fill(TOKEN)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(url)


def _fits(page: sync_api.Page) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, "the page scrolls sideways"


def _on_screen(page: sync_api.Page, cell: sync_api.Locator) -> None:
    box = cell.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"]


def test_trouble_workers_charts_and_timelines_at_a_laptops_and_a_phones_width(
    cluster: LocalCluster, service: str, page: sync_api.Page
) -> None:
    Limiter.from_settings(load_settings(broker_url=cluster.broker_url)).pause("vendor-a.example", 600)
    tag = os.urandom(4).hex()
    small = cluster.fleet().map(
        "console_test_tasks.bumpy",
        [{"n": n, "tag": tag, "sleep_s": 0.3} for n in range(24)],
        name="vendor-sync",
    )
    small.wait(timeout_s=90)
    big = cluster.fleet().map(
        "console_test_tasks.noop", [{"n": n, "sleep_s": 0.002} for n in range(10_000)], name="bulk-classify"
    )
    wait_for(lambda: big.summary().succeeded >= 2000, timeout_s=120, what="the big run under way")
    for width, suffix in ((LAPTOP, ""), (PHONE, "-phone")):
        page.set_viewport_size(width)
        try:
            _open(page, f"{service}/console/workers?refresh=0")
            assert page.get_by_role("row").filter(has_text="threads").count() == 2
            _fits(page)
            _shot(page, f"console-workers{suffix}")
        finally:
            page.set_viewport_size(LAPTOP)
    finished = big.wait(timeout_s=300)
    assert (finished.succeeded, finished.failed, finished.retries) == (10_000 - 103, 103, 112)
    console = f"{service}/console"
    for width, suffix in ((LAPTOP, ""), (PHONE, "-phone")):
        page.set_viewport_size(width)
        try:
            _open(page, f"{console}/runs?refresh=0")
            banner = page.get_by_role("region", name=re.compile("^The fleet (is degraded|needs attention)"))
            assert "vendor-a.example is paused for every worker for" in banner.inner_text()
            row = page.get_by_role("row").filter(has_text=small.id)
            assert "finished, 6 failed" in row.inner_text()
            _on_screen(page, row.locator('td[data-label="Failed"]'))
            _fits(page)
            _shot(page, f"console-fleet{suffix}")

            _open(page, f"{console}/runs/{small.id}?refresh=0")
            assert page.get_by_role("img", name=re.compile("^Items finished")).count() == 1
            _fits(page)
            _shot(page, f"console-run-charts{suffix}")

            _open(page, f"{console}/runs/{small.id}/timeline?refresh=0")
            lanes = page.get_by_role("heading", level=3)
            assert lanes.count() == 2, "one lane for each of the two workers"
            assert page.locator("svg.lane-svg a").count() == 24 + 6 + 6, "a bar per attempt"
            _fits(page)
            _shot(page, f"console-timeline{suffix}")

            _open(page, f"{console}/runs/{big.id}/timeline?refresh=0")
            assert page.get_by_text("10112 attempts: each lane shows how many ran at once").is_visible()
            assert page.locator("svg.lane-svg a").count() == 0
            _fits(page)
            _shot(page, f"console-timeline-bins{suffix}")

            _open(page, f"{console}/limits?refresh=0")
            paused = page.get_by_role("row").filter(has_text="vendor-a.example").get_by_role("cell").first
            assert "paused" in paused.inner_text()
            _on_screen(page, paused)
        finally:
            page.set_viewport_size(LAPTOP)


UNLABELLED_CONTROLS = """
[...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
  .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.textContent.trim())
  .map(el => el.outerHTML)
"""


@pytest.mark.parametrize("path", ["/runs", "/workers", "/dlq", "/limits", "/schedules", "/spend"])
def test_each_page_fits_a_phone_and_labels_every_control(
    service: str, page: sync_api.Page, path: str
) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.goto(f"{service}/console{path}?refresh=0")
        if page.url.startswith(f"{service}/console/login"):
            page.get_by_label("Service token").fill(TOKEN)
            page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{service}/console{path}?refresh=0")
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, "the page scrolls sideways; only tables may, inside their own box"
        assert page.get_by_role("navigation", name="Console").is_visible()
        assert page.get_by_role("main").count() == 1 and page.get_by_role("heading", level=1).count() == 1
        assert page.evaluate(UNLABELLED_CONTROLS) == [], "a control a screen reader cannot name"
        if path == "/dlq":
            _shot(page, "console-dlq-phone")
    finally:
        page.set_viewport_size(LAPTOP)
