"""What Flower and ``celery inspect`` show of a dispatched item: its own inputs, redacted."""

from __future__ import annotations

from typing import Any

from agentfleet.celery_config import make_app
from agentfleet.config import load_settings
from agentfleet.protocol.messages import item_signature
from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.protocol.reprs import message_reprs, redact_published_reprs
from agentfleet.redaction import Redactor

SECRET = "sk-shown-5a7e19c3"
REDACTOR = Redactor.build(values=[SECRET])


def test_the_internal_block_and_secrets_are_left_out() -> None:
    kwargs = {"text": f"key {SECRET}", "password": "p", META_KWARG: {"run": "r", "key": "k", "item": "0"}}
    shown = message_reprs(kwargs, REDACTOR)
    assert shown == {"argsrepr": "()", "kwargsrepr": "{'password': '[REDACTED]', 'text': 'key [REDACTED]'}"}


def test_a_large_input_is_cut_to_a_kilobyte() -> None:
    shown = message_reprs({"docs": ["x" * 5000] * 500}, REDACTOR)
    assert len(shown["kwargsrepr"]) <= 1024


def test_messages_a_worker_publishes_again_get_the_same_reprs() -> None:
    headers: dict[str, Any] = {"argsrepr": "({'ok': True},)", "kwargsrepr": f"{{'_af': 1, 't': '{SECRET}'}}"}
    body = (({"ok": True, "result": SECRET},), {"t": SECRET, META_KWARG: {"run": "r"}}, {})
    redact_published_reprs(body, headers, REDACTOR)
    assert headers == {
        "argsrepr": "({'ok': True, 'result': '[REDACTED]'},)",
        "kwargsrepr": "{'t': '[REDACTED]'}",
    }


def test_each_dispatched_item_carries_its_redacted_reprs() -> None:
    app = make_app(load_settings(broker_url="redis://127.0.0.1:9/0"))
    meta = ItemMeta(run="r1", key="k", item="0")
    inputs = {"text": "hello", "api_key": SECRET}
    signature = item_signature(
        app, names=["some.task"], queues=["agents"], meta=meta, inputs=inputs, redactor=REDACTOR
    )
    assert signature.options["kwargsrepr"] == "{'api_key': '[REDACTED]', 'text': 'hello'}"
    assert signature.options["argsrepr"] == "()"
    assert signature.kwargs[META_KWARG] == meta.to_kwarg(), "the worker still gets the whole message"
