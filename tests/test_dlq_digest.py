"""The digest: one log line, and a Slack-shaped POST to a local webhook only when over the threshold."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
import redis
from dlq_samples import sample_entry
from http_scripted import Reply, ScriptedServer

from agentfleet.celery_config import DIGEST_ENTRY, celery_config
from agentfleet.config import Settings, load_settings
from agentfleet.dlq import DLQStore, post_webhook
from agentfleet.errors import ConfigError
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.tasks.maintenance import dlq_digest, run_digest


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


def _settings(redis_url: str, prefix: str, url: str, threshold: int = 5) -> Settings:
    return load_settings(
        broker_url=redis_url,
        key_prefix=prefix,
        dlq={"webhook_url": url, "digest_threshold": threshold, "webhook_attempts": 3},
    )


def _fill(client: redis.Redis, settings: Settings, n: int) -> None:
    store = DLQStore.from_settings(settings, client)
    for i in range(n):
        store.add(sample_entry(index=i, category="poison" if i == 0 else "downstream_error"))


def test_over_the_threshold_it_posts_a_slack_message(
    redis_client: redis.Redis,
    redis_url: str,
    key_prefix: str,
    server: ScriptedServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.script("/over", Reply(200, "ok"))
    settings = _settings(redis_url, key_prefix, server.url("/over"))
    _fill(redis_client, settings, 6)
    with caplog.at_level(logging.INFO, logger="agentfleet.maintenance"):
        record = run_digest(settings, client=redis_client)
    assert record["posted"] is True and record["depth"] == 6
    [hit] = server.hits("/over")
    payload = hit.json()
    assert "6 dead letters" in payload["text"] and "downstream_error 5" in payload["text"]
    assert payload["blocks"][0]["type"] == "section"
    [line] = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert line["event"] == "dlq_digest" and line["by_category"] == {"downstream_error": 5, "poison": 1}


def test_at_or_under_the_threshold_it_only_logs(
    redis_client: redis.Redis, redis_url: str, key_prefix: str, server: ScriptedServer
) -> None:
    server.script("/under", Reply(200, "ok"))
    settings = _settings(redis_url, key_prefix, server.url("/under"))
    _fill(redis_client, settings, 5)
    record = run_digest(settings, client=redis_client)
    assert (record["depth"], record["over_threshold"], record["posted"]) == (5, False, False)
    assert server.hits("/under") == []


def test_the_digest_names_vendor_issues(
    redis_client: redis.Redis, redis_url: str, key_prefix: str, server: ScriptedServer
) -> None:
    server.script("/vendor", Reply(200, "ok"))
    settings = _settings(redis_url, key_prefix, server.url("/vendor"), threshold=0)
    _fill(redis_client, settings, 1)
    breaker = CircuitBreaker.from_settings(settings, redis_client)
    for _ in range(5):
        breaker.record_failure("vendor-b.example")
    record = run_digest(settings, client=redis_client)
    assert [(i["downstream"], i["circuit"]) for i in record["vendor_issues"]] == [
        ("vendor-b.example", "open")
    ]
    assert "Vendor issues: vendor-b.example" in server.hits("/vendor")[0].json()["text"]


def test_the_post_is_retried_on_5xx_and_given_up_on_4xx(server: ScriptedServer) -> None:
    server.script("/flaky", Reply(503), Reply(502), Reply(200))
    waits: list[float] = []
    result = post_webhook(server.url("/flaky"), {"text": "x"}, attempts=3, backoff_s=0.01, sleep=waits.append)
    assert (result.ok, result.attempts, len(server.hits("/flaky"))) == (True, 3, 3)
    assert waits == [0.01, 0.02]
    server.script("/gone", Reply(404))
    result = post_webhook(server.url("/gone"), {"text": "x"}, attempts=3, backoff_s=0.01, sleep=waits.append)
    assert (result.ok, result.attempts, result.status_code) == (False, 1, 404)


def test_an_unreachable_webhook_is_a_result_not_an_exception() -> None:
    result = post_webhook(
        "http://127.0.0.1:1/hook", {"text": "x"}, attempts=2, backoff_s=0.0, sleep=lambda _: None
    )
    assert (result.ok, result.attempts) == (False, 2)
    assert result.error and "ConnectError" in result.error


def test_the_task_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_BROKER_URL", "redis://127.0.0.1:1/0")
    record = dlq_digest()
    assert record["event"] == "dlq_digest" and "ConnectionError" in record["error"]


def test_beat_sends_the_digest_on_the_configured_schedule() -> None:
    config = celery_config(load_settings(dlq={"digest_cron": "15 6 * * 1-5"}))
    entry = config["beat_schedule"][DIGEST_ENTRY]
    assert entry["task"] == "agentfleet.maintenance.dlq_digest"
    assert entry["options"] == {"queue": "agentfleet.maintenance"}
    assert entry["schedule"].hour == {6} and entry["schedule"].minute == {15}
    assert entry["schedule"].day_of_week == {1, 2, 3, 4, 5}


@pytest.mark.parametrize(("cron", "problem"), [("0 8 * *", "five fields"), ("0 25 * * *", "not a cron")])
def test_a_bad_digest_cron_names_the_setting_both_ways(cron: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as raised:
        load_settings(dlq={"digest_cron": cron})
    assert "AGENTFLEET_DLQ__DIGEST_CRON / dlq.digest_cron" in str(raised.value)
