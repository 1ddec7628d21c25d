"""Malformed queue entries, one piece at a time: what is wrong with each kind, the dead letter
kept of it (redacted, cut, named), and the receiver that keeps it, drops it at the cap, or
drops it when it cannot be written, never raising."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator

import pytest
import redis
from malformed_support import bad_entries, encoded, envelope, with_body

from agentfleet.config import Settings, load_settings
from agentfleet.dlq import DLQFilter, DLQStore
from agentfleet.dlq.malformed import malformed_dead_letter
from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.redaction import REDACTED, Redactor
from agentfleet.tasks.malformed import DeadLetterReceiver
from agentfleet.transport import malformed
from agentfleet.transport.diagnosis import diagnose
from agentfleet.transport.malformed import MalformedEntry, hand_over

ACCEPT = {"application/json"}
QUEUE = "tests.agents"
ENTRIES = bad_entries(QUEUE, "fleet_test_tasks.echo")


@pytest.fixture(autouse=True)
def _no_receiver() -> Iterator[None]:
    yield
    malformed.uninstall()


@pytest.mark.parametrize("kind", [k for k in ENTRIES if k != "a task no worker has"])
def test_each_kind_of_bad_entry_is_named_in_words(kind: str) -> None:
    raw, reason = ENTRIES[kind]
    found = diagnose(raw, accept=ACCEPT)
    assert found is not None and reason in found


def test_a_task_message_as_celery_sends_it_has_nothing_wrong() -> None:
    assert diagnose(encoded(envelope("fleet_test_tasks.echo", queue=QUEUE)), accept=ACCEPT) is None


def test_entries_kombu_cannot_parse_are_named_too() -> None:
    assert diagnose(b"", accept=ACCEPT) == "the entry is empty"
    assert "nested too deeply" in str(diagnose(b"[" * 100_000, accept=ACCEPT))
    marker = encoded({"properties": {"__type__": "datetime", "__value__": "not a date"}})
    assert "a value kombu cannot read" in str(diagnose(marker, accept=ACCEPT))


def test_the_dead_letter_keeps_the_entry_with_its_body_decoded_and_its_secrets_redacted() -> None:
    secret, known = "sk-live-0123456789abcdef", "hunter2-known-secret"
    message = envelope(
        "fleet_test_tasks.echo",
        queue=QUEUE,
        kwargs={"api_key": secret, "text": "hello there"},
        **{"content-type": "application/data"},
    )
    message["headers"]["argsrepr"] = f"('{known}',)"
    raw = encoded(message)
    letter = malformed_dead_letter(
        raw,
        "its content type 'application/data' is not one the workers accept",
        queue=QUEUE,
        worker="w1@host",
        redactor=Redactor.build(values=[known]),
        keep_bytes=4096,
    )
    shown = letter.raw_message
    assert "hello there" in shown and "body (decoded)" in shown
    assert secret not in shown and known not in shown and shown.count(REDACTED) >= 2
    assert base64.b64encode(secret.encode()).decode()[:12] not in shown
    assert (letter.category, letter.error_type) == ("malformed", "MalformedMessage")
    assert (letter.task_name, letter.task_id) == ("fleet_test_tasks.echo", message["headers"]["id"])
    assert letter.queue == QUEUE and letter.worker == "w1@host"
    assert letter.requeue_blocker is not None and "malformed" in letter.requeue_blocker
    # The same bytes found again are the same dead letter.
    assert (
        malformed_dead_letter(raw, "again", queue=QUEUE, worker="w2", redactor=Redactor(), keep_bytes=64).id
        == letter.id
    )


def test_an_entry_that_is_not_json_is_kept_as_text_with_its_secrets_redacted() -> None:
    letter = malformed_dead_letter(
        b"password=hunter2-secret and \xff\xfe",
        "not JSON",
        queue=QUEUE,
        worker="w",
        redactor=Redactor.build(),
        keep_bytes=4096,
    )
    assert "hunter2-secret" not in letter.raw_message and REDACTED in letter.raw_message
    assert "\\xff\\xfe" in letter.raw_message
    assert letter.task_name == "" and letter.run_id == ""


def test_the_kept_text_is_cut_to_its_size_after_redaction() -> None:
    raw = encoded(with_body(envelope("t", queue=QUEUE), b"x" * 100_000))
    letter = malformed_dead_letter(raw, "big", queue=QUEUE, worker="w", redactor=Redactor(), keep_bytes=1000)
    kept, _, note = letter.raw_message.partition(" ... [cut: ")
    assert len(kept.encode()) <= 1000 and note == f"the entry was {len(raw)} bytes]"


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(broker_url=redis_url, key_prefix=key_prefix, dlq={"malformed_max_entries": 2})


def test_malformed_entries_are_kept_up_to_the_cap_then_dropped_with_one_line_and_counted(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    receive = DeadLetterReceiver(settings, worker="w1@host", redactor=Redactor)
    with caplog.at_level(logging.WARNING, logger="agentfleet.failures"):
        for n in range(3):
            receive(MalformedEntry(f"not JSON {n}".encode(), "not JSON", QUEUE))
    store = DLQStore.from_settings(settings)
    assert len(store.find(DLQFilter(category="malformed"))) == 2
    assert store.malformed_counts() == {"dead_lettered": 2, "dropped": 1}
    (dropped,) = [r for r in caplog.records if "malformed_message_dropped" in r.getMessage()]
    assert "dlq.malformed_max_entries" in json.loads(dropped.getMessage())["why"]


def test_the_dead_letter_names_the_run_and_item_a_fleet_message_carries(settings: Settings) -> None:
    meta = ItemMeta(run="r1", idx=4, key="r1:4:abc", item="4")
    message = envelope("fleet_test_tasks.echo", queue=QUEUE, kwargs={"n": 4, META_KWARG: meta.to_kwarg()})
    raw = encoded({**message, "content-type": "application/x-unknown"})
    DeadLetterReceiver(settings, worker="w1@host", redactor=Redactor)(MalformedEntry(raw, "refused", QUEUE))
    (letter,) = DLQStore.from_settings(settings).find()
    assert (letter.run_id, letter.item_key, letter.index, letter.idempotency_key) == (
        "r1",
        "4",
        4,
        "r1:4:abc",
    )


def test_an_entry_whose_dead_letter_cannot_be_written_is_dropped_with_one_line(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # A Redis that does not answer: nothing listens on that port.
    store = DLQStore(redis.Redis(port=1, socket_connect_timeout=0.2), prefix="x")
    receive = DeadLetterReceiver(settings, worker="w1@host", store=store, redactor=Redactor)
    with caplog.at_level(logging.WARNING, logger="agentfleet.failures"):
        receive(MalformedEntry(b"[1]", "JSON that is not an object (a list)", QUEUE))
    (line,) = [r.getMessage() for r in caplog.records]
    assert "could not be written" in json.loads(line)["why"]


def test_a_receiver_that_fails_never_stops_the_reader(caplog: pytest.LogCaptureFixture) -> None:
    def broken(entry: MalformedEntry) -> None:
        raise RuntimeError("the receiver broke")

    malformed.install(broken, accept=["json"])
    with caplog.at_level(logging.WARNING, logger="agentfleet.worker"):
        hand_over(MalformedEntry(b"[1]", "JSON that is not an object (a list)", QUEUE))
        malformed.uninstall()
        hand_over(MalformedEntry(b"[2]", "JSON that is not an object (a list)", QUEUE))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "the receiver broke" in lines[0] and "no receiver is installed" in lines[1]
