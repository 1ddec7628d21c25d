"""Key names of the run store, hash-tagged so that a Redis Cluster keeps together what one
script touches.

Redis Cluster places a key by the part of its name between the first ``{`` and the next
``}`` (its hash tag) when there is one, and refuses a script whose keys live in different
slots. So:

- a run's keys carry the run id as their tag: ``p:run:{<id>}``, ``p:run:{<id>}:items``...;
- an item's keys (its outcome, claim, failed attempts, unfinished deliveries) carry the item's
  tag: the run id for a default idempotency key (``<run id>:<index>:<input hash>``, see
  ``agentfleet.idempotency``), so an item lives in its run's slot and starting or finishing it
  is one script; for a key given with ``key=`` (which must be found again by a later run), the
  key itself, so another run of the same key finds the same outcome and claim;
- fleet-wide keys (``p:runs``, ``p:runs:active``, ``p:stats``...) have no tag: no script
  touches them, and each may live anywhere.

On a single Redis the tags change nothing.
"""

from __future__ import annotations

import re

__all__ = ["RunKeys", "item_tag"]

# A default idempotency key: the 16-hex run id, the item's index, the input's hash, then an
# optional stage or step suffix (``#s0``, ``#n:...``, see ``agentfleet.idempotency``).
_DEFAULT_KEY = re.compile(r"^([0-9a-f]{16}):\d+:[0-9a-f]+(?:#|$)")
_STAGE_OR_STEP = re.compile(r"#(?:s\d+|n:.*)$")


def item_tag(key: str) -> str:
    """The hash tag of the item whose idempotency key is ``key``: its run id for a default key,
    else the key itself without a stage or step suffix (every stage and step of one item
    shares its slot)."""
    found = _DEFAULT_KEY.match(key)
    if found:
        return found.group(1)
    return _STAGE_OR_STEP.sub("", key) or key


class RunKeys:
    """The run store's key names under ``prefix``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def run(self, run_id: str, part: str = "") -> str:
        """``p:run:{<id>}`` (hash), or one of its parts: ``items``, ``inputs``, ``done``,
        ``events``, ``suspect``, ``counted``, ``spans``, ``lanes``."""
        return f"{self.prefix}:run:{{{run_id}}}" + (f":{part}" if part else "")

    def item(self, kind: str, key: str) -> str:
        """An item's ``kind`` key (``out``, ``claim``, ``errs``...) for idempotency key ``key``."""
        tag = item_tag(key)
        if key.startswith(tag):
            return f"{self.prefix}:{kind}:{{{tag}}}{key[len(tag) :]}"
        return f"{self.prefix}:{kind}:{{{tag}}}{key}"

    def deliveries(self, key: str, task_id: str) -> str:
        """Deliveries of ``task_id`` that did not finish, in the slot of its item ``key``."""
        return self.item("deliv", key) + f":{task_id}"

    def same_slot(self, run_id: str, key: str) -> bool:
        """Whether the item ``key`` lives in the slot of run ``run_id``."""
        return item_tag(key) == run_id

    @property
    def runs(self) -> str:
        """Sorted set: run ids by creation time."""
        return f"{self.prefix}:runs"

    @property
    def active(self) -> str:
        """Set: runs the reconciler looks after."""
        return f"{self.prefix}:runs:active"

    @property
    def stats(self) -> str:
        """Hash: fleet-wide counters."""
        return f"{self.prefix}:stats"

    def done_bucket(self, second: int) -> str:
        """Items counted in the epoch second ``second``."""
        return f"{self.prefix}:stats:done:{second}"

    def minute(self, minute: int) -> str:
        """Hash: the fleet's figures of the epoch minute ``minute`` (``runs/history.py``)."""
        return f"{self.prefix}:stats:min:{minute}"
