"""Deciding over HTTP, on a real ``agentfleet serve`` on loopback: ``/approvals``, ``/events``,
the signed single-use link, the console's Approvals page and the metrics.

Approvals are recorded straight in the store, as a parked item records them (the parking
itself, with real workers, is the mechanism's suite and ``test_approval_agents``); the oracle
is the store: what it holds decided, by whom.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from approval_support import TOKEN, Served, pending, served
from prometheus_client.parser import text_string_to_metric_families

from agentfleet.approvals import ApprovalStore
from agentfleet.approvals.links import link_for
from agentfleet.config import Settings, load_settings
from agentfleet.service.approval_link_pages import _NOTICES

pytestmark = pytest.mark.slow

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"as{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def service(redis_url: str, prefix: str) -> Iterator[Served]:
    with served(redis_url, prefix) as running:
        yield running


@pytest.fixture
def settings(redis_url: str, prefix: str, service: Served) -> Settings:
    return load_settings(
        broker_url=redis_url,
        key_prefix=prefix,
        service={"token": TOKEN, "public_url": service.url},
        approvals={"link_secret": "link-" + "fedcba9876543210" * 2},
    )


@pytest.fixture
def store(settings: Settings) -> ApprovalStore:
    return ApprovalStore.from_settings(settings)


@pytest.fixture
def http(service: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=service.url, timeout=10) as client:
        yield client


# The JSON API ---------------------------------------------------------------------------------


def test_the_api_needs_the_service_token(http: httpx.Client) -> None:
    assert http.get("/approvals").status_code == 401
    assert http.post("/approvals/ap_x", json={"approved": True}).status_code == 401
    assert (
        http.post("/events/ci", json={"data": 1}, headers={"Authorization": "Bearer wrong"}).status_code
        == 401
    )


def test_listing_filters_by_run_and_status(
    http: httpx.Client, store: ApprovalStore, settings: Settings
) -> None:
    mine = pending(store, settings, name="ship it", details={"version": "1.2"})
    other = pending(store, settings, name="other run")
    listed = http.get("/approvals", params={"run": mine.run_id}, headers=AUTH).json()["approvals"]
    assert [a["id"] for a in listed] == [mine.id]
    assert listed[0]["name"] == "ship it" and listed[0]["details"] == {"version": "1.2"}
    assert other.id in {a["id"] for a in http.get("/approvals", headers=AUTH).json()["approvals"]}
    assert http.get("/approvals", params={"status": "approved"}, headers=AUTH).json() == {"approvals": []}
    bad = http.get("/approvals", params={"status": "maybe"}, headers=AUTH)
    assert bad.status_code == 422 and "pending" in bad.json()["error"]


def test_a_decision_is_recorded_with_who_and_the_second_gets_409_with_the_first(
    http: httpx.Client, store: ApprovalStore, settings: Settings
) -> None:
    asked = pending(store, settings)
    first = http.post(
        f"/approvals/{asked.id}",
        json={"approved": True, "comment": "looks fine", "data": {"replicas": 3}, "by": "alice"},
        headers=AUTH,
    )
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "approved"
    second = http.post(f"/approvals/{asked.id}", json={"approved": False, "by": "bob"}, headers=AUTH)
    assert second.status_code == 409
    standing = second.json()["approval"]
    assert standing["decision"]["by"] == "alice" and standing["decision"]["approved"] is True
    assert standing["decision"]["decided_at"] > 0
    decision = store.get(asked.id).decision
    assert decision is not None and decision.by == "alice" and decision.data == {"replicas": 3}
    assert decision.comment == "looks fine"
    assert http.get(f"/approvals/{asked.id}", headers=AUTH).json()["status"] == "approved"


def test_unknown_ids_bad_bodies_and_late_decisions_are_refused(
    http: httpx.Client, store: ApprovalStore, settings: Settings
) -> None:
    assert http.post("/approvals/ap_nothing", json={"approved": True}, headers=AUTH).status_code == 404
    assert http.get("/approvals/ap_nothing", headers=AUTH).status_code == 404
    asked = pending(store, settings)
    for body in ({"approved": "yes"}, {"approved": True, "extra": 1}, {"approved": False, "data": {}}):
        answer = http.post(f"/approvals/{asked.id}", json=body, headers=AUTH)
        assert answer.status_code == 422, body
    assert store.get(asked.id).status == "pending"
    soon = pending(store, settings, timeout_s=0.5)
    time.sleep(1.0)
    late = http.post(f"/approvals/{soon.id}", json={"approved": True}, headers=AUTH)
    assert late.status_code == 410
    assert late.json()["approval"]["status"] == "timed_out"
    assert store.get(soon.id).status == "timed_out"


def test_an_event_completes_every_wait_on_its_key(
    http: httpx.Client, store: ApprovalStore, settings: Settings
) -> None:
    key = f"ci-{uuid.uuid4().hex[:6]}"
    waits = [pending(store, settings, name=key, kind="event") for _ in range(2)]
    answer = http.post(f"/events/{key}", json={"data": {"passed": True}}, headers=AUTH)
    assert answer.json() == {"key": key, "completed": 2}
    for wait in waits:
        decision = store.get(wait.id).decision
        assert decision is not None and decision.approved and decision.data == {"passed": True}
    assert http.post(f"/events/{key}", json={"data": 1}, headers=AUTH).json()["completed"] == 0
    assert http.post(f"/events/{key}", json=[1], headers=AUTH).status_code == 422


# The signed link ------------------------------------------------------------------------------


def test_the_link_shows_a_form_decides_once_and_then_says_who_decided(
    http: httpx.Client, store: ApprovalStore, settings: Settings
) -> None:
    asked = pending(store, settings, name="send the newsletter", details={"to": "everyone"})
    link = link_for(settings, asked)
    assert link is not None and link.startswith(f"{settings.service.public_url}/approvals/{asked.id}/decide?")
    page = http.get(link)
    assert page.status_code == 200 and "send the newsletter" in page.text and "everyone" in page.text
    assert 'value="approve"' in page.text and "script" not in page.headers["content-security-policy"]
    assert store.get(asked.id).status == "pending", "opening the link (a chat preview) decides nothing"
    fields = dict(re.findall(r'name="(expires|sig)" value="([^"]+)"', page.text))
    path = urlsplit(link).path
    done = http.post(path, data={**fields, "decision": "reject", "comment": "not today", "by": "carol"})
    assert done.status_code == 200 and _NOTICES[200] in done.text
    again = http.post(path, data={**fields, "decision": "approve"})
    assert again.status_code == 409 and "carol" in again.text and "rejected" in again.text
    decision = store.get(asked.id).decision
    assert decision is not None and not decision.approved and decision.by == "carol"
    assert decision.comment == "not today"


def test_a_changed_or_expired_link_is_refused(
    http: httpx.Client, store: ApprovalStore, settings: Settings
) -> None:
    asked = pending(store, settings)
    link = link_for(settings, asked)
    assert link is not None
    other = pending(store, settings)
    forged = link.replace(asked.id, other.id)
    assert http.get(forged).status_code == 403
    path = urlsplit(forged).path
    fields = dict(re.findall(r"(expires|sig)=([^&]+)", link))
    assert http.post(path, data={**fields, "decision": "approve"}).status_code == 403
    assert store.get(other.id).status == "pending"
    stale = pending(store, settings, timeout_s=0.5)
    stale_link = link_for(settings, stale)
    assert stale_link is not None
    time.sleep(2.2)  # the link lives one whole second past the approval's expiry
    refused = http.get(stale_link)
    assert refused.status_code == 403 and "expired" in refused.text


# The console ----------------------------------------------------------------------------------


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)


def test_the_console_lists_pending_approvals_and_decides_with_csrf(
    service: Served, store: ApprovalStore, settings: Settings
) -> None:
    asked = pending(store, settings, name="wire the refund", details={"amount_usd": 420})
    origin = {"Origin": service.url}
    with httpx.Client(base_url=service.url, timeout=10, follow_redirects=True) as browser:
        form = browser.get("/console/login")
        signed = browser.post(
            "/console/login", data={"csrf": _csrf(form.text), "token": TOKEN}, headers=origin
        )
        assert signed.status_code in (200, 303)
        page = browser.get("/console/approvals")
        assert page.status_code == 200
        assert "wire the refund" in page.text and "420" in page.text and f"/runs/{asked.run_id}" in page.text
        csrf = _csrf(page.text)
        forged = browser.post(f"/console/approvals/{asked.id}", data={"decision": "approve"}, headers=origin)
        assert forged.status_code == 403 and store.get(asked.id).status == "pending"
        decided = browser.post(
            f"/console/approvals/{asked.id}",
            data={"csrf": csrf, "decision": "approve", "comment": "refund ok"},
            headers=origin,
        )
        assert decided.status_code == 200 and "approved" in decided.text
        again = browser.post(
            f"/console/approvals/{asked.id}", data={"csrf": csrf, "decision": "reject"}, headers=origin
        )
        assert again.status_code == 409 and "console" in again.text
        listed = browser.get("/console/approvals").text
        assert "refund ok" in listed
    decision = store.get(asked.id).decision
    assert decision is not None and decision.approved and decision.by == "console"


# Metrics --------------------------------------------------------------------------------------


def _metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no {name} {labels}")


def test_metrics_count_pending_approvals_and_decisions(
    http: httpx.Client, store: ApprovalStore, settings: Settings
) -> None:
    before = http.get("/metrics").text
    waiting = _metric(before, "agentfleet_approvals_pending")
    rejected = _metric(before, "agentfleet_approval_decisions_total", decision="rejected")
    asked = pending(store, settings)
    assert _metric(http.get("/metrics").text, "agentfleet_approvals_pending") == waiting + 1
    store.decide(asked.id, approved=False, by="dave")
    after = http.get("/metrics").text
    assert _metric(after, "agentfleet_approvals_pending") == waiting
    assert _metric(after, "agentfleet_approval_decisions_total", decision="rejected") == rejected + 1
