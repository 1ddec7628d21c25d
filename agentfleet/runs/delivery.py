"""Starting and finishing one delivery of an item: one script each, on the item's slot.

``begin`` reads the run's status and any stored outcome, claims the item and counts the
delivery; ``finish`` stores the outcome (first write wins), releases the claim and counts the
outcome once for its run, unless another delivery holds a live claim on an item that has no
outcome yet (the finishing delivery's claim lapsed and was taken over): then it writes nothing
and says so (``FinishState.fenced``). A run ends at Redis's clock, when its last outcome is
stored. Each is one script call (``runs/scripts/delivery/``) when the item's
keys live in its run's slot: always on a single Redis, and on a Redis Cluster for every item
with a default idempotency key (see ``agentfleet.keys``). An item whose key was given with
``key=`` may live in another slot of a cluster; then ``begin`` reads the run's status and runs
the item's half, and ``finish`` runs the item's half, then the run's half with the outcome that
stood (two round trips each).

What every item shares (the fleet-wide counters, the set of active runs) is not touched by
these scripts: the caller adds counted outcomes to a ``StatsTally`` and drops a finished run
from the active set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agentfleet.keys import RunKeys
from agentfleet.lua import ScriptSet
from agentfleet.models import TaskOutcome
from agentfleet.runs.lanes import LaneCache
from agentfleet.runs.spans import AttemptSpan

__all__ = ["DELIVERY_LUA", "BeginState", "DeliveryScripts", "FinishState", "outcome_kind"]

DELIVERY_LUA = ScriptSet("agentfleet.runs", "scripts/delivery", libraries=("parts",))

Verdict = Literal["stored", "cancelled", "busy", "claimed"]
_STOPPED = ("cancelled", "failed")

#: Items (and runs) whose key names a process keeps between a delivery's begin and finish (a
#: worker has at most its concurrency's items in flight).
_ITEMS_NAMED = 1024


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    # Full: forget everything and start again (safe beside other threads, unlike forgetting
    # the oldest, which iterates the dict while another thread may add to it).
    if len(cache) >= _ITEMS_NAMED:
        cache.clear()
    cache[key] = value


@dataclass(frozen=True)
class BeginState:
    """What a delivery finds when it starts.

    ``verdict`` says what it must do: ``stored`` (return the stored outcome), ``cancelled``
    (the run was cancelled or failed fast), ``busy`` (another delivery holds a live claim on
    the item, for ``claim_left_s`` more seconds) or ``claimed`` (run the body; the claim is
    this delivery's). ``deliveries`` counts the claimed deliveries of the task id that did
    not finish, this one included.
    """

    status: str
    stored: TaskOutcome | None
    deliveries: int
    verdict: Verdict = "claimed"
    claim_left_s: float = 0.0

    @property
    def cancelled(self) -> bool:
        """True when the run was cancelled, or failed fast: this delivery must not run."""
        return self.verdict == "cancelled"


@dataclass(frozen=True)
class FinishState:
    """Whether an outcome was counted for its run, the run's progress, and if it just ended (and
    then, whether it stays active for its aggregate or compensations).

    ``stood`` is the outcome that stands for the item when it is not the one given (another
    delivery stored its own first), else None. ``fenced``: nothing was written because another
    delivery holds a live claim on the item, for ``claim_left_s`` more seconds.
    """

    recorded: bool
    done: int
    total: int
    run_ended: bool
    aggregate: str = ""
    stays_active: bool = False
    stood: TaskOutcome | None = None
    fenced: bool = False
    claim_left_s: float = 0.0


def outcome_kind(outcome: TaskOutcome) -> str:
    """The run counter an outcome moves: ``succeeded``, ``cancelled`` or ``failed``."""
    if outcome.ok:
        return "succeeded"
    return "cancelled" if outcome.error_type == "Cancelled" else "failed"


class DeliveryScripts:
    """The delivery scripts on one client; ``clustered`` when it is a Redis Cluster client.
    ``lanes``: the lanes this process's workers were given on runs' timelines."""

    def __init__(self, client: Any, keys: RunKeys, *, ttl_s: int, clustered: bool) -> None:
        self.client = client
        self.keys = keys
        self.ttl_s = ttl_s
        self.clustered = clustered
        self.lanes = LaneCache()
        self._names: dict[tuple[str, str], list[str]] = {}
        self._runs: dict[str, dict[str, str]] = {}
        self._scripts = DELIVERY_LUA.register(
            client, "begin", "begin_item", "finish", "finish_item", "finish_run", "attempt"
        )

    def _item_names(self, key: str, task_id: str) -> list[str]:
        # The item's outcome, deliveries, claim and memory keys, named once for a delivery's
        # begin and finish.
        names = self._names.get((key, task_id))
        if names is None:
            names = self.keys.items(key, "out", "deliv", "claim", "mem", task_id=task_id)
            _remember(self._names, (key, task_id), names)
        return names

    def _run_names(self, run_id: str) -> dict[str, str]:
        # The names beside the run's record, by part: a delivery names seven of them.
        names = self._runs.get(run_id)
        if names is None:
            names = self.keys.parts(run_id)
            _remember(self._runs, run_id, names)
        return names

    def _together(self, run_id: str, key: str) -> bool:
        return not self.clustered or self.keys.same_slot(run_id, key)

    def begin(
        self,
        run_id: str,
        key: str,
        task_id: str,
        *,
        deliveries_ttl_s: int,
        token: str,
        claim_ttl_s: float,
        preclaimed: bool = False,
    ) -> BeginState:
        """Claim ``key`` for ``claim_ttl_s`` seconds under ``token`` unless it has an outcome,
        another delivery holds it, or the run stopped; count the delivery of ``task_id``
        (``preclaimed``: ``token`` claimed the item up front, as a batch does)."""
        item_keys = self._item_names(key, task_id)[:3]
        args: list[Any] = [deliveries_ttl_s, token, max(1, int(claim_ttl_s * 1000)), int(preclaimed)]
        if self._together(run_id, key):
            status, stored, n, verdict, left_ms = self._scripts["begin"](
                keys=[self._run_names(run_id)[""], *item_keys], args=args
            )
        else:
            # A cluster runs no script inside a pipeline: the status first, then the item half.
            status = self.client.hget(self.keys.run(run_id), "status") or ""
            stored, n, verdict, left_ms = self._scripts["begin_item"](keys=item_keys, args=args)
            if verdict == "claimed" and status in _STOPPED:
                # The run stopped: give back the claim the item half just took.
                self.client.delete(item_keys[2])
                verdict, n = "cancelled", 0
        return BeginState(
            status=str(status),
            stored=TaskOutcome.model_validate_json(stored) if stored else None,
            deliveries=int(n),
            verdict=verdict,
            claim_left_s=max(0.0, int(left_ms) / 1000),
        )

    def finish(
        self, outcome: TaskOutcome, *, store: bool, record: bool, token: str, span: AttemptSpan | None = None
    ) -> FinishState:
        """Store ``outcome`` (unless ``store`` is false), release ``token``'s claim, and count
        the outcome that stands for its run (when ``record``); nothing when another delivery
        holds the item's claim (``fenced``). ``span`` (the worker and its attempt's time) goes
        on the run's timeline with the outcome, or as a stage passed on (see ``runs/spans.py``)."""
        run_id, key = outcome.run_id, outcome.idempotency_key
        *item_keys, memory = self._item_names(key, outcome.task_id)
        names = self._run_names(run_id)
        run_keys = [names[""], names["done"], names["events"]]
        inputs, recorded = names["inputs"], names["recorded"]
        timeline = [names["spans"], names["lanes"]]
        worker, duration_ms = span.args() if span is not None else ("", 0)
        lane = self.lanes.get(run_id, worker)
        body = outcome.model_dump_json()
        counted: list[Any] = [
            outcome.index,
            body,
            outcome_kind(outcome),
            int(outcome.dead_lettered),
            repr(outcome.cost_usd),
            round(outcome.duration_s * 1_000_000),
            self.ttl_s,
        ]
        if self._together(run_id, key):
            reply = self._scripts["finish"](
                keys=[*run_keys, *item_keys, inputs, memory, *timeline, recorded],
                args=[*counted, int(store), int(record), token, worker, duration_ms, lane],
            )
            *head, stood, fenced, left_ms, used = reply
            self.lanes.note(run_id, worker, used)
            return _finish_state(head, body, str(stood or ""), bool(fenced), left_ms)
        stood, left_ms, _ = self._scripts["finish_item"](
            keys=[*item_keys, memory], args=[body, token, int(store), self.ttl_s]
        )
        if not stood:
            return _finish_state([], body, "", True, left_ms)
        counts: list[Any] = []
        if record:
            counted[1] = stood
            counts = self._scripts["finish_run"](
                keys=[*run_keys, inputs, *timeline, recorded], args=[*counted, worker, duration_ms, lane]
            )
            self.lanes.note(run_id, worker, counts[6])
            counts = counts[:6]
        return _finish_state(counts, body, "" if stood == body else str(stood), False, 0)

    def attempt(
        self, run_id: str, field: str, *, event: str, index: int, span: AttemptSpan, ttl_s: int
    ) -> bool:
        """Add one to the run counter ``field`` (``retries`` or ``deferrals``) for ``event``,
        once, and note the attempt on the run's timeline; True when this call counted it."""
        keys = [
            self.keys.run(run_id),
            self.keys.run(run_id, "counted"),
            self.keys.run(run_id, "spans"),
            self.keys.run(run_id, "lanes"),
        ]
        kind = "r" if field == "retries" else "d"
        worker, duration_ms = span.args()
        lane = self.lanes.get(run_id, worker)
        args: list[Any] = [field, event, ttl_s, index, worker, duration_ms, kind, lane]
        counted, used = self._scripts["attempt"](keys=keys, args=args)
        self.lanes.note(run_id, worker, used)
        return bool(counted)


def _finish_state(head: list[Any], body: str, stood: str, fenced: bool, left_ms: Any) -> FinishState:
    """A ``FinishState`` from a finish script's reply (``head``: its counting part, empty when
    nothing was counted); ``body`` is the outcome given, ``stood`` the one that stands if not it."""
    recorded, done, total, ended, aggregate, stays = head or (0, 0, 0, 0, "", 0)
    return FinishState(
        bool(recorded),
        int(done),
        int(total),
        bool(ended),
        str(aggregate or ""),
        bool(stays),
        stood=TaskOutcome.model_validate_json(stood) if stood and stood != body else None,
        fenced=fenced,
        claim_left_s=max(0.0, int(left_ms) / 1000) if fenced else 0.0,
    )
