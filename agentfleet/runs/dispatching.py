"""A run's record written while its items are dispatched, chunk by chunk.

A run of a million items is not held in memory and not written in one transaction: the
record is opened first, each chunk's items and inputs are appended before that chunk's
messages are sent, and closing it sets the total. While it is open the run hash carries
``dispatching``: the epoch seconds until which the dispatcher promises its next chunk (it
pushes the promise forward with each one). Meanwhile no outcome ends the run (its total is
not known yet); the reconciler leaves the run alone, and once the promise has passed (the
dispatching process died) it closes the record at the items recorded so far and sends those
that have no message, as it does for any lost message.

Keys are the run store's (``runs/store.py``); the fields added here:

- ``p:run:{<id>}`` ``dispatching`` (float, epoch seconds), deleted when the record is closed;
  ``sent``: items from index 0 whose messages went out (the reconciler looks no further while
  the dispatch goes on); ``tasks_total`` grows with each chunk and is final once
  ``dispatching`` is gone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from agentfleet.outages import repeatable
from agentfleet.runs.delivery import DELIVERY_LUA, FinishState
from agentfleet.runs.store import RunStore

__all__ = ["DispatchRecord", "dispatch_deadline"]


def dispatch_deadline(record: Mapping[str, str]) -> float | None:
    """Until when (epoch seconds) the run's dispatcher promised its next chunk; None when the
    run is not being dispatched."""
    raw = record.get("dispatching")
    return float(raw) if raw else None


class DispatchRecord:
    """Opens, appends to and closes runs' records on ``store``; each call is ``@repeatable``."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self._end = DELIVERY_LUA.register(store.client, "end_dispatch")["end_dispatch"]

    @repeatable
    def open(
        self,
        run_id: str,
        *,
        name: str,
        kind: str,
        task: str,
        queues: Sequence[str],
        aggregate: str | None,
        fail_fast: bool,
        max_in_flight: int | None,
        extra: Mapping[str, Any],
        promise_s: float,
    ) -> None:
        """Record a run with no items yet, dispatching for ``promise_s`` seconds."""
        created = time.time()
        self.store.create_run(
            run_id,
            name=name,
            kind=kind,
            task=task,
            items=[],
            queues=queues,
            aggregate=aggregate,
            fail_fast=fail_fast,
            max_in_flight=max_in_flight,
            created_at=created,
            extra=extra,
            dispatching_until=created + promise_s,
        )

    @repeatable
    def append(
        self,
        run_id: str,
        start: int,
        items: Sequence[tuple[str, str, str]],
        inputs: Sequence[str],
        *,
        sent: int,
        promise_s: float,
    ) -> None:
        """Record items ``start``... (``(task_id, key, item key)`` each) and their inputs (JSON
        text), that the messages of the first ``sent`` items went out, and promise the next
        chunk within ``promise_s`` seconds, in one transaction."""
        store = self.store
        pipe = store.client.pipeline(transaction=True)
        pipe.hset(
            store.run_key(run_id, "items"),
            mapping={str(start + i): json.dumps(r) for i, r in enumerate(items)},
        )
        pipe.hset(
            store.run_key(run_id, "inputs"), mapping={str(start + i): raw for i, raw in enumerate(inputs)}
        )
        for part in ("items", "inputs"):
            pipe.expire(store.run_key(run_id, part), store.ttl_s)
        pipe.hset(
            store.run_key(run_id),
            mapping={
                "tasks_total": start + len(items),
                "sent": sent,
                "dispatching": repr(time.time() + promise_s),
            },
        )
        pipe.execute()

    @repeatable
    def promise(self, run_id: str, promise_s: float) -> None:
        """Still dispatching (waiting for room in the queues): promise the next chunk within
        ``promise_s`` seconds."""
        self.store.client.hset(self.store.run_key(run_id), "dispatching", repr(time.time() + promise_s))

    @repeatable
    def close(self, run_id: str, total: int) -> FinishState:
        """Every item is recorded and sent: set the total. The run ends here when each of its
        items already has its outcome; the caller then sends its aggregate or drops it from
        the active runs, as the last outcome's worker would. A record closed already is left
        as it is (the run does not end twice; one that the first call ended is the
        reconciler's to finish off)."""
        store = self.store
        ended, done, final, _, aggregate, stays = self._end(
            keys=[store.run_key(run_id), store.run_key(run_id, "events")], args=[total, repr(time.time())]
        )
        state = FinishState(False, int(done), int(final), bool(ended), str(aggregate or ""), bool(stays))
        if state.run_ended:
            store.tally.add_count("runs_finished")
            if not state.stays_active:
                store.deactivate(run_id)
        return state
