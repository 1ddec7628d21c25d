"""The credential audit stream on a real Redis."""

from __future__ import annotations

import time

import redis

from agentfleet.tools.audit import AuditLog


def test_record_and_read_in_order(redis_client: redis.Redis, key_prefix: str) -> None:
    log = AuditLog(redis_client, key_prefix)
    first = log.record("t1", "vendor_a", "api.vendor.example", at=1000.5)
    log.record(None, "vendor_b", "b.example")
    entries = log.read()
    assert [(e.task_id, e.credential, e.domain) for e in entries] == [
        ("t1", "vendor_a", "api.vendor.example"),
        ("-", "vendor_b", "b.example"),
    ]
    assert entries[0].id == first and entries[0].time == 1000.5
    assert redis_client.type(f"{key_prefix}:creds:audit") == "stream"


def test_read_latest_and_since(redis_client: redis.Redis, key_prefix: str) -> None:
    log = AuditLog(redis_client, key_prefix)
    for index in range(5):
        log.record(f"t{index}", "c", "d")
    time.sleep(0.01)
    cut = time.time()
    time.sleep(0.01)
    for index in range(5, 8):
        log.record(f"t{index}", "c", "d")
    assert [e.task_id for e in log.read(count=2)] == ["t6", "t7"]
    assert [e.task_id for e in log.read(count=10, since=cut)] == ["t5", "t6", "t7"]
    assert [e.task_id for e in log.read(count=2, since=0)] == ["t0", "t1"]


def test_the_stream_is_capped(redis_client: redis.Redis, key_prefix: str) -> None:
    log = AuditLog(redis_client, key_prefix, maxlen=50)
    for index in range(1000):
        log.record(f"t{index}", "c", "d")
    length = redis_client.xlen(log.key)
    # MAXLEN ~ trims whole macro nodes (100 entries by default), so allow one node of slack.
    assert 50 <= length <= 150
    assert log.read(count=1)[0].task_id == "t999"
