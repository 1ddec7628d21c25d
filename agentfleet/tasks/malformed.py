"""Where a worker's malformed queue entries go: the dead-letter queue, category ``malformed``.

The transport and Celery's consumer take out of its queue every entry a worker cannot decode or
deliver as a task, and hand it to the receiver installed here at worker start
(``transport.malformed``). It keeps the entry as a dead letter (its text redacted and cut to
``dlq.malformed_keep_bytes``, the reason, and the run and item it names, if it carries a fleet
item's place) and logs one line. It drops the entry instead, with one log line and a count
(``agentfleet_malformed_messages_total{outcome="dropped"}``), when it cannot be kept:
``dlq.malformed_max_entries`` malformed dead letters wait already, or the dead letter could not
be written. A malformed entry never finishes an item: an item whose message was mangled has no
outcome, and the reconciler sends it again from its run's record.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

from agentfleet.config import Settings
from agentfleet.dlq import DLQStore
from agentfleet.dlq.malformed import envelope_of, malformed_dead_letter
from agentfleet.protocol.meta import META_KWARG, ItemMeta
from agentfleet.redaction import Redactor
from agentfleet.tasks.process_logging import process_redactor
from agentfleet.transport import malformed
from agentfleet.transport.malformed import MalformedEntry

__all__ = ["DeadLetterReceiver", "install_receiver"]

log = logging.getLogger("agentfleet.failures")


def _item_fields(raw: bytes) -> dict[str, Any] | None:
    """The run fields of the fleet item ``raw`` names in its body, if it is one."""
    envelope = envelope_of(raw)
    try:
        body: Any = envelope["body"] if envelope is not None else None
        if envelope is not None and envelope["properties"].get("body_encoding") == "base64":
            body = base64.b64decode(body)
        meta = ItemMeta.model_validate(json.loads(body)[1][META_KWARG])
    except Exception:
        return None
    return {"run_id": meta.run, "item_key": meta.item, "index": meta.idx, "idempotency_key": meta.key}


class DeadLetterReceiver:
    """Keeps malformed queue entries as dead letters, or drops and counts them (see the module
    docstring). Called on the worker's consumer; never raises."""

    def __init__(
        self,
        settings: Settings,
        *,
        worker: str,
        store: DLQStore | None = None,
        redactor: Callable[[], Redactor] = process_redactor,
    ) -> None:
        self.settings = settings
        self.worker = worker
        self.store = store or DLQStore.from_settings(settings)
        self.redactor = redactor

    def __call__(self, entry: MalformedEntry) -> None:
        limits = self.settings.dlq
        letter = malformed_dead_letter(
            entry.raw,
            entry.reason,
            queue=entry.queue,
            worker=self.worker,
            redactor=self.redactor(),
            keep_bytes=limits.malformed_keep_bytes,
            item=_item_fields(entry.raw),
        )
        record = {
            "queue": entry.queue,
            "bytes": len(entry.raw),
            "task": letter.task_name,
            "reason": letter.error[:500],
        }
        try:
            kept = self.store.keep_malformed(letter, max_entries=limits.malformed_max_entries)
        except Exception as exc:
            self._dropped(record, f"its dead letter could not be written: {exc}")
            with contextlib.suppress(Exception):
                self.store.count_malformed("dropped")
            return
        if kept:
            kept_record = {"event": "malformed_message_dead_lettered", "dead_letter": letter.id, **record}
            log.error(json.dumps(kept_record))
        else:
            cap = limits.malformed_max_entries
            self._dropped(record, f"{cap} malformed dead letters wait already (dlq.malformed_max_entries)")

    @staticmethod
    def _dropped(record: dict[str, Any], why: str) -> None:
        log.warning(json.dumps({"event": "malformed_message_dropped", "why": why, **record}))


def install_receiver(settings: Settings, *, worker: str, accept: Iterable[str]) -> None:
    """Send this worker's malformed queue entries to the dead-letter queue; ``accept`` is the
    content types its consumer accepts (Celery's ``accept_content``)."""
    malformed.install(DeadLetterReceiver(settings, worker=worker), accept=accept)
