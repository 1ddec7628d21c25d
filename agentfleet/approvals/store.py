"""The pauses in Redis: pending approvals and event waits, their decisions, their items' messages.

Layout under ``{p:ap}`` (names from ``agentfleet.keys.ApprovalKeys``; one hash tag, so one
script decides a pause and moves it between every index at once):

- ``{p:ap}:a:<id>``    hash: ``a`` (the approval as JSON), ``status``, ``run``, ``ev`` (event
  key), ``exp`` (expiry, Unix s), ``ot`` (on_timeout), ``msg`` (the item's message), ``created``,
  and once decided ``approved``, ``by``, ``comment``, ``data`` (JSON), ``timed_out``, ``decided_at``
- ``{p:ap}:all`` / ``:pending`` / ``:due`` / ``:outbox``  sorted sets of ids (see ``keys.py``)
- ``{p:ap}:run:<run id>``, ``{p:ap}:ev:<key>``  sets of ids
- ``{p:ap}:parked:<run id>``  hash: index -> pause id of the run's parked items

Every change is one script (``scripts/``): the first decision stands, a decision after the
timeout is refused (the timeout decides then), an event completes every wait on its key. A
decided pause goes to the outbox; ``resume.send_decided`` publishes its item's message and takes
it out (the reconciler sends what a crashed decider left there). Records of decided pauses
expire ``keep_s`` after their item was sent again; pending ones never expire.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from agentfleet.approvals.model import Approval, ApprovalStatus, Decision
from agentfleet.approvals.resume import send_again
from agentfleet.errors import ApprovalAlreadyDecided, ApprovalError, ApprovalExpired, ApprovalNotFound
from agentfleet.keys import ApprovalKeys
from agentfleet.lua import ScriptSet
from agentfleet.outages import repeatable
from agentfleet.redis_client import state_client

if TYPE_CHECKING:
    from celery import Celery

    from agentfleet.config import Settings
    from agentfleet.redis_handles import StateRedis

__all__ = ["APPROVAL_LUA", "ApprovalStore"]

APPROVAL_LUA = ScriptSet("agentfleet.approvals", "scripts", libraries=("settle",))
_FIELDS = (
    "a",
    "status",
    "exp",
    "ot",
    "created",
    "approved",
    "by",
    "comment",
    "data",
    "timed_out",
    "decided_at",
)


def _json(value: Any, what: str) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ApprovalError(f"{what} must be JSON: {exc}") from None


def _approval(approval_id: str, f: Sequence[str | None]) -> Approval:
    """An ``Approval`` from the record's ``_FIELDS``."""
    raw, status, exp, ot, created, approved, by, comment, data, timed_out, decided_at = f
    base = json.loads(raw or "{}")
    decision = None
    if status not in (None, "pending", "cancelled") and approved is not None:
        decision = Decision(
            approved=approved == "1",
            by=json.loads(by or "null"),
            comment=json.loads(comment or "null"),
            data=json.loads(data or "null"),
            timed_out=timed_out == "1",
            decided_at=float(decided_at or 0),
        )
    base.update(
        id=approval_id,
        status=status or "pending",
        created_at=float(created or 0),
        expires_at=float(exp) if exp else None,
        on_timeout=ot or "reject",
        decision=decision,
    )
    return Approval.model_validate(base)


class ApprovalStore:
    """Pauses in Redis. Safe to share between threads; every change is atomic.

    With ``app`` (a Celery app on the fleet's broker), a decision, an event and a cancellation
    send the items they end again at once; without one, the reconciler sends them on its next
    pass. ``keep_s``: seconds a decided pause is kept after its item was sent again.
    """

    def __init__(
        self, client: StateRedis, *, prefix: str = "af", keep_s: int = 7 * 86400, app: Celery | None = None
    ) -> None:
        self.client: Any = client
        self.keys = ApprovalKeys(prefix)
        self.keep_s = keep_s
        self.app = app
        scripts = APPROVAL_LUA.register(client, "create", "decide", "timeout", "event", "cancel", "sent")
        self._create, self._decide = scripts["create"], scripts["decide"]
        self._timeout, self._event, self._cancel = scripts["timeout"], scripts["event"], scripts["cancel"]
        self._sent = scripts["sent"]

    @classmethod
    def from_settings(
        cls, settings: Settings, client: StateRedis | None = None, *, app: Celery | None = None
    ) -> ApprovalStore:
        return cls(
            client or state_client(settings),
            prefix=settings.key_prefix,
            keep_s=settings.result_ttl_s,
            app=app,
        )

    def _run(self, script: Any, *args: Any) -> Any:
        return script(keys=[self.keys.all], args=[self.keys.root, *args])

    # Pausing (the worker) --------------------------------------------------------------------

    @repeatable
    def create(self, approval: Approval, message: dict[str, Any], *, timeout_s: float | None = None) -> bool:
        """Record ``approval`` pending with its item's ``message`` (a Celery signature as a
        dict, sent again once decided), expiring ``timeout_s`` seconds from now (Redis time;
        None: never). False when a pause of that id is there already (it stands as it is)."""
        made, _status = self._run(
            self._create,
            approval.id,
            approval.model_dump_json(exclude={"status", "decision", "created_at", "expires_at"}),
            approval.run_id,
            approval.key or "" if approval.kind == "event" else "",
            "" if timeout_s is None else repr(float(timeout_s)),
            approval.on_timeout,
            _json(message, "the item's message"),
            self.keep_s,
            approval.index,
        )
        return bool(made)

    # Reading ---------------------------------------------------------------------------------

    def find(self, approval_id: str) -> Approval | None:
        """The pause ``approval_id``, or None."""
        found = self.get_many([approval_id])
        return found[0] if found else None

    def get(self, approval_id: str) -> Approval:
        """The pause ``approval_id``; ``ApprovalNotFound`` when there is none."""
        found = self.find(approval_id)
        if found is None:
            raise ApprovalNotFound(f"no approval has the id {approval_id!r}")
        return found

    def get_many(self, ids: Iterable[str]) -> builtins.list[Approval]:
        """The pauses of ``ids`` that exist, in that order."""
        ids = list(ids)
        with self.client.pipeline(transaction=False) as pipe:
            for approval_id in ids:
                pipe.hmget(self.keys.record(approval_id), _FIELDS)
            rows = pipe.execute()
        return [_approval(i, f) for i, f in zip(ids, rows, strict=True) if f[1] is not None]

    def list(
        self, run_id: str | None = None, status: ApprovalStatus | None = "pending", limit: int | None = 100
    ) -> list[Approval]:
        """Pauses newest first: of run ``run_id`` (None: every run), of ``status`` (None: any),
        at most ``limit`` (None: all)."""
        if run_id is not None:
            ids = list(self.client.smembers(self.keys.run(run_id)))
        else:
            ids = list(
                self.client.zrevrange(self.keys.pending if status == "pending" else self.keys.all, 0, -1)
            )
        found = [a for a in self.get_many(ids) if status is None or a.status == status]
        found.sort(key=lambda a: a.created_at, reverse=True)
        return found if limit is None else found[:limit]

    def pending_count(self, run_id: str) -> int:
        """How many of run ``run_id``'s items wait for a decision now."""
        return sum(1 for a in self.list(run_id, "pending", None))

    def parked_indices(self, run_id: str) -> set[int]:
        """The indices of run ``run_id``'s items parked now: their pause pending, or decided
        with the item not yet sent again (one read, however many)."""
        return {int(idx) for idx in self.client.hkeys(self.keys.parked(run_id))}

    def parked_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """How many items each of runs ``run_ids`` has parked now (pending a decision, or
        decided and about to be sent again): one ``HLEN`` per run, in one round trip."""
        if not run_ids:
            return {}
        with self.client.pipeline(transaction=False) as pipe:
            for run_id in run_ids:
                pipe.hlen(self.keys.parked(run_id))
            return {run_id: int(n) for run_id, n in zip(run_ids, pipe.execute(), strict=True)}

    def messages(self, ids: Sequence[str]) -> builtins.list[dict[str, Any] | None]:
        """The messages that send the items of pauses ``ids`` again (None where there is none)."""
        with self.client.pipeline(transaction=False) as pipe:
            for approval_id in ids:
                pipe.hget(self.keys.record(approval_id), "msg")
            return [json.loads(raw) if raw else None for raw in pipe.execute()]

    # Deciding --------------------------------------------------------------------------------

    def decide(
        self,
        approval_id: str,
        *,
        approved: bool,
        by: str | None = None,
        comment: str | None = None,
        data: Any = None,
    ) -> Approval:
        """Decide pause ``approval_id`` and send its item again; returns it decided.

        The first decision stands: a later one raises ``ApprovalAlreadyDecided`` carrying the
        approval as it stands. Past its timeout the timeout decides and this raises
        ``ApprovalExpired`` (carrying that). ``ApprovalNotFound`` when there is no such pause;
        ``ApprovalError`` when ``data`` is not JSON."""
        verdict = self._run(
            self._decide,
            approval_id,
            "1" if approved else "0",
            _json(by, "by"),
            _json(comment, "comment"),
            _json(data, "data"),
        )
        if verdict == "missing":
            raise ApprovalNotFound(f"no approval has the id {approval_id!r}")
        if verdict == "expired":
            self.send_decided([approval_id])
        standing = self.get(approval_id)
        if verdict == "decided" and standing.status == "timed_out":
            raise ApprovalExpired(f"approval {approval_id} timed out before this decision", standing)
        if verdict == "decided":
            raise ApprovalAlreadyDecided(f"approval {approval_id} was already {standing.status}", standing)
        if verdict == "expired":
            raise ApprovalExpired(f"approval {approval_id} timed out before this decision", standing)
        self.send_decided([approval_id])
        return standing

    def send_event(self, key: str, data: Any = None, *, by: str | None = None) -> int:
        """Complete every pending wait on event ``key`` with ``data`` (JSON); returns how many.
        An event nobody waits for is not kept."""
        before = self.client.smembers(self.keys.event(key))
        count = int(self._run(self._event, key, _json(data, "data"), _json(by, "by")))
        self.send_decided(before)
        return count

    def cancel_run(self, run_id: str) -> int:
        """Cancel run ``run_id``'s pending pauses (their items are sent again to end cancelled);
        returns how many."""
        count = int(self._run(self._cancel, run_id))
        if count:
            self.send_decided(self.client.smembers(self.keys.run(run_id)))
        return count

    def time_out_due(self, limit: int = 500) -> builtins.list[str]:
        """Let the timeout decide the pending pauses past it (at most ``limit``); their ids."""
        return list(self._run(self._timeout, limit))

    # Sending items again ---------------------------------------------------------------------

    def outbox(self, older_than: float, limit: int = 500) -> builtins.list[str]:
        """Ids decided at or before Unix time ``older_than`` whose item is not yet sent again."""
        return list(self.client.zrangebyscore(self.keys.outbox, "-inf", older_than, start=0, num=limit))

    def mark_sent(self, ids: Iterable[str]) -> None:
        """The items of pauses ``ids`` were sent again: out of the outbox and their runs' parked
        items, each record kept ``keep_s`` more."""
        with self.client.pipeline(transaction=False) as pipe:
            for approval_id in ids:
                self._sent(keys=[self.keys.all], args=[self.keys.root, approval_id, self.keep_s], client=pipe)
            pipe.execute()

    def send_decided(self, ids: Iterable[str]) -> int:
        """Send again the items of the ``ids`` still in the outbox, with this store's app (none:
        the reconciler will); returns how many were sent."""
        if self.app is None:
            return 0
        return send_again(self, self.app, ids)
