"""The credential audit log: one Redis stream entry per use of a credential, and one per
request a sandbox's egress proxy refused.

A use (``event`` ``use``) says which task used which credential for which domain, and when. A
refusal (``event`` ``refused``) says which task of which run was refused which destination
(``scheme://host:port``; ``domain`` is its host), why, and the credential it named when that
was the reason. No entry holds a credential's value. The stream is capped (approximately,
``MAXLEN ~``) so it cannot grow without bound; the oldest entries go first, uses and refusals
alike.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import redis
from pydantic import BaseModel

from agentfleet.errors import ConnectionFailed
from agentfleet.keys import audit_key
from agentfleet.redis_handles import StateRedis

__all__ = ["AuditEntry", "AuditEvent", "AuditLog"]

DEFAULT_MAXLEN = 100_000


AuditEvent = Literal["use", "refused"]


class AuditEntry(BaseModel):
    """One use of a credential (``event`` ``use``) or one refused egress request (``event``
    ``refused``: ``reason`` says why, ``destination`` what was asked, ``run_id`` and ``task``
    name the item's run and task; ``credential`` is set when a credential was the reason;
    ``repeats`` is how many refusals of that kind the entry stands for, more than one when
    they came faster than once a second). ``time`` is Unix seconds."""

    id: str
    task_id: str
    credential: str
    domain: str
    time: float
    event: AuditEvent = "use"
    run_id: str = ""
    task: str = ""
    destination: str = ""
    reason: str = ""
    repeats: int = 1


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _count(value: str) -> int:
    try:
        return max(1, int(value))
    except ValueError:
        return 1


class AuditLog:
    """The stream ``<prefix>:creds:audit`` (``agentfleet.keys.audit_key``), capped at about
    ``maxlen`` entries."""

    def __init__(self, client: StateRedis, prefix: str, *, maxlen: int = DEFAULT_MAXLEN) -> None:
        self._client = client
        self.key = audit_key(prefix)
        self._maxlen = maxlen

    def record(self, task_id: str | None, credential: str, domain: str, *, at: float | None = None) -> str:
        """Append one use; returns the stream entry id.

        ``at`` is Unix seconds (now when None). A Redis failure raises ``ConnectionFailed``
        so that a credential is never used without its audit entry.
        """
        fields: dict[Any, Any] = {
            "event": "use",
            "task_id": task_id or "-",
            "credential": credential,
            "domain": domain,
            "time": f"{time.time() if at is None else at:.6f}",
        }
        try:
            entry_id = self._client.xadd(
                self.key,
                fields,
                maxlen=self._maxlen,
                approximate=True,
            )
        except redis.RedisError as exc:
            raise ConnectionFailed(f"credential audit log unavailable: {exc}") from None
        return _text(entry_id)

    def record_refusal(
        self,
        *,
        task_id: str | None,
        run_id: str,
        task: str,
        destination: str,
        domain: str,
        reason: str,
        credential: str = "",
        at: float | None = None,
        repeats: int = 1,
    ) -> str | None:
        """Append one entry for ``repeats`` refused egress requests of one kind; returns the
        entry id, or None when Redis could not take it (the refusal stands all the same: the
        caller logs it). ``at`` is Unix seconds (now when None)."""
        fields: dict[Any, Any] = {
            "event": "refused",
            "task_id": task_id or "-",
            "run_id": run_id,
            "task": task,
            "destination": destination,
            "domain": domain,
            "credential": credential,
            "reason": reason,
            "time": f"{time.time() if at is None else at:.6f}",
        }
        if repeats != 1:
            fields["repeats"] = str(repeats)
        try:
            entry_id = self._client.xadd(self.key, fields, maxlen=self._maxlen, approximate=True)
        except (redis.RedisError, OSError):
            return None
        return _text(entry_id)

    def read(self, count: int = 100, since: float | None = None) -> list[AuditEntry]:
        """Up to ``count`` entries, oldest first.

        With ``since`` (Unix seconds, by the Redis server's clock, which stamps each entry's
        id), the first ``count`` entries recorded at or after it; without, the latest
        ``count`` entries.
        """
        if since is None:
            raw = list(reversed(self._client.xrevrange(self.key, count=count)))  # type: ignore[arg-type]
        else:
            start = f"{int(since * 1000)}-0"
            raw = self._client.xrange(self.key, min=start, count=count)  # type: ignore[assignment]
        entries: list[AuditEntry] = []
        for entry_id, fields in raw:
            values = {_text(k): _text(v) for k, v in (fields or {}).items()}
            entries.append(
                AuditEntry(
                    id=_text(entry_id),
                    task_id=values.get("task_id", "-"),
                    credential=values.get("credential", ""),
                    domain=values.get("domain", ""),
                    time=float(values.get("time", "0") or 0),
                    event="refused" if values.get("event") == "refused" else "use",
                    run_id=values.get("run_id", ""),
                    task=values.get("task", ""),
                    destination=values.get("destination", ""),
                    reason=values.get("reason", ""),
                    repeats=_count(values.get("repeats", "1")),
                )
            )
        return entries
