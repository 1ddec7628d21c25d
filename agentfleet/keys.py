"""Every Redis key agentfleet writes, named in one place (as arq keeps its names in
``constants.py``); ``KEYS`` at the bottom lists each kind with its Redis type, docs/keys.md
explains each (what it holds, its hash tag, who writes it, when it expires), and a name built
elsewhere or missing from the table fails a test (``tests/test_key_registry.py``,
``tests/test_key_census.py``). Every name starts with the fleet's key prefix ``p``
(``Settings.key_prefix``, ``af`` by default), so fleets that share a Redis never meet.

Hash tags. Redis Cluster places a key by the part of its name between the first ``{`` and the
next ``}`` when there is one, and refuses a script whose keys live in different slots. So:

- a run's keys carry the run id as their tag: ``p:run:{<id>}``, ``p:run:{<id>}:items``...;
- an item's keys (outcome, claim, memory, failed attempts, unfinished deliveries) carry the
  item's tag: the run id for a default idempotency key (``agentfleet.idempotency``), so starting
  or finishing an item is one script in its run's slot; for a ``key=`` given (which a later run
  must find again), the key itself;
- the limiter, the circuit breakers, the dead-letter queue, the worker registry and the
  service's sign-in state each have a tag of their own (``{p:rl}``, ``{p:cb}``, ``{p:dlq}``,
  ``{p:wk}``, ``{p:auth}``): their scripts touch several of their keys at once;
- a day's spend carries ``{p:spend:<date>}``, which the budgets' per-day hashes share;
- fleet-wide keys (``p:runs``, ``p:runs:active``, ``p:stats``...) have no tag: no script
  touches them, and each may live anywhere.

On a single Redis the tags change nothing. Names built inside Lua (``DeadLetterKeys.root``'s,
a batch's ``<deliveries key>:<claim token>``) are in ``KEYS`` too. Keys kombu, Celery and
redbeat write (queues, ``unacked``, results, the beat schedule) are theirs (docs/keys.md lists
them apart); only redbeat's prefix is ours to choose (``redbeat_prefix``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agentfleet.key_patterns import KeyPattern, kinds

__all__ = [
    "ITEM_KINDS",
    "KEYS",
    "RUN_PARTS",
    "AccessKeys",
    "ApprovalKeys",
    "CircuitKeys",
    "DeadLetterKeys",
    "KeyPattern",
    "LimiterKeys",
    "RunKeys",
    "SpendKeys",
    "WorkerKeys",
    "audit_key",
    "firing_key",
    "item_tag",
    "queue_head_key",
    "redbeat_prefix",
]

#: The keys beside a run's record, ``p:run:{<id>}:<part>``.
RUN_PARTS = frozenset(
    {"items", "inputs", "done", "recorded", "events", "suspect", "counted", "spans", "lanes"}
    | {"undo", "undo:data", "undo:state"}
)
#: An item's keys, ``p:<kind>:{<tag>}...``: outcome, claim, memory, failures, deliveries, graph.
ITEM_KINDS = frozenset({"out", "claim", "mem", "errs", "deliv", "graph"})

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
    """The run store's names: runs, their items, the fleet-wide index and counters."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def parts(self, run_id: str) -> dict[str, str]:
        """Every name beside run ``run_id``'s record at once, by part (``""``: the record)."""
        base = self.run(run_id)
        return {"": base, **{part: f"{base}:{part}" for part in RUN_PARTS}}

    def run(self, run_id: str, part: str = "") -> str:
        """``p:run:{<id>}`` (hash), or one of the ``RUN_PARTS`` beside it."""
        if part and part not in RUN_PARTS:
            raise ValueError(f"no run key part {part!r}: add it to agentfleet.keys.RUN_PARTS and KEYS")
        return f"{self.prefix}:run:{{{run_id}}}" + (f":{part}" if part else "")

    def item(self, kind: str, key: str) -> str:
        """An item's ``kind`` key (one of ``ITEM_KINDS``) for idempotency key ``key``; also a
        named lock's claim (``item("claim", "reconciler")``)."""
        return self.items(key, kind)[0]

    def items(self, key: str, *kinds: str, task_id: str = "") -> list[str]:
        """Several of the item ``key``'s keys at once (each of ``kinds`` one of ``ITEM_KINDS``;
        ``deliv`` is ``deliveries(key, task_id)``), its tag found once."""
        if not ITEM_KINDS.issuperset(kinds):
            raise ValueError(f"no item key kind in {kinds!r}: add it to agentfleet.keys.ITEM_KINDS and KEYS")
        tag = item_tag(key)
        named = f"{{{tag}}}{key[len(tag) :] if key.startswith(tag) else key}"
        prefix, deliv = self.prefix, f"{named}:{task_id}" if task_id else named
        return [f"{prefix}:{kind}:{deliv if kind == 'deliv' else named}" for kind in kinds]

    def deliveries(self, key: str, task_id: str, *, handed_back: str = "") -> str:
        """Counter of unfinished deliveries of ``task_id`` (in item ``key``'s slot); with
        ``handed_back``, that claim token's mark of having come off it."""
        counter = self.items(key, "deliv", task_id=task_id)[0]
        return f"{counter}:back:{handed_back}" if handed_back else counter

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


class LimiterKeys:
    """The limiter's names, under ``{p:rl}``: one acquire checks several downstreams at once."""

    def __init__(self, prefix: str) -> None:
        self.root = f"{{{prefix}:rl}}"
        #: Sorted set of the downstreams seen, scored by when (server ms).
        self.registry = f"{self.root}:known"

    def pause(self, downstream: str) -> str:
        """Paused-until (server ms); expires when the pause ends."""
        return f"{self.root}:{downstream}:pause"

    def holders(self, downstream: str) -> str:
        """Sorted set of lease ids scored by lease expiry (server ms)."""
        return f"{self.root}:{downstream}:holders"

    def hold_time(self, downstream: str) -> str:
        """Moving average of how long a lease is held (ms), for wait hints."""
        return f"{self.root}:{downstream}:hold"

    def reclaimed(self, downstream: str) -> str:
        """Leases that ran out while held and were taken back by an acquire (a count)."""
        return f"{self.root}:{downstream}:reclaimed"

    def buckets(self, downstream: str, names: Iterable[str]) -> str:
        """JSON ``[tokens of each bucket..., server ms]``. The bucket names are part of the
        key, so a record is never read with another layout."""
        return f"{self.root}:{downstream}:buckets:{'+'.join(names)}"


class CircuitKeys:
    """The circuit breakers' names, all under ``{p:cb}``: a report touches a downstream's keys
    and the list of known downstreams at once."""

    def __init__(self, prefix: str) -> None:
        self.root = f"{{{prefix}:cb}}"
        #: Sorted set: downstreams by their last failure or state change.
        self.known = f"{self.root}:known"

    def circuit(self, downstream: str) -> str:
        """Hash: the downstream's state and its times."""
        return f"{self.root}:{downstream}"

    def window(self, downstream: str) -> str:
        """Hash: failure, success and started-call counts per bucket of the window."""
        return f"{self.root}:{downstream}:w"


class DeadLetterKeys:
    """The dead-letter queue's names, all under ``{p:dlq}``: one script writes an entry and
    every index of it. The scripts build the same names from ``root`` (``dlq/scripts/``)."""

    def __init__(self, prefix: str) -> None:
        self.root = f"{{{prefix}:dlq}}"
        #: Stream: one ``id`` per entry, in the order they arrived.
        self.stream = f"{self.root}:stream"
        #: Hash: fingerprint -> a sample ``[error type, normalised message]``.
        self.fingerprints = f"{self.root}:fp"
        #: Hash: malformed queue entries kept (``dead_lettered``) and ``dropped``.
        self.malformed = f"{self.root}:malformed"
        #: String: bytes every entry's artifacts take, as stored (base64).
        self.artifact_bytes = f"{self.root}:abytes"

    def entry(self, entry_id: str) -> str:
        """Hash: the entry as JSON and its indexed fields."""
        return f"{self.root}:e:{entry_id}"

    def artifacts(self, entry_id: str) -> str:
        """Hash: artifact name -> its bytes (base64), of the entry ``entry_id``."""
        return f"{self.root}:a:{entry_id}"

    def index(self, dimension: str, value: str) -> str:
        """Set of the ids of entries whose ``dimension`` is ``value``."""
        return f"{self.root}:i:{dimension}:{value}"

    def counts(self, dimension: str) -> str:
        """Hash: value of ``dimension`` -> entry count."""
        return f"{self.root}:n:{dimension}"


class SpendKeys:
    """The spend ledger's and the budgets' names: a run's under its run id's tag, a day's under
    ``{p:spend:<date>}``."""

    def __init__(self, prefix: str) -> None:
        self.root = f"{prefix}:spend"

    def run(self, run_id: str) -> str:
        """Hash: downstream -> US dollars the run's calls to it cost."""
        return f"{self.root}:run:{{{run_id}}}"

    def day(self, day: str) -> str:
        """Hash: downstream -> US dollars spent on UTC date ``day`` (``2026-01-31``)."""
        return f"{self.root}:day:{{{self.root}:{day}}}"

    def budget(self, run_id: str) -> str:
        """String: the run's own budget in US dollars."""
        return f"{self.root}:budget:{{{run_id}}}"

    def tenants(self, day: str) -> str:
        """Hash: tenant -> US dollars spent on UTC date ``day``."""
        return self.day(day) + ":tenants"

    def alerts(self, day: str) -> str:
        """Hash: the budget alerts raised on UTC date ``day`` -> 1."""
        return self.day(day) + ":alerts"


class WorkerKeys:
    """The worker registry's names, under ``{p:wk}``: a heartbeat's transaction and a read of
    every record stay on one node."""

    def __init__(self, prefix: str) -> None:
        root = f"{{{prefix}:wk}}"
        #: Sorted set: node name -> epoch seconds its record expires.
        self.index = f"{root}:workers"
        self._record = f"{root}:worker:"

    def record(self, node: str) -> str:
        """String: the worker's record as JSON."""
        return self._record + node


class AccessKeys:
    """Who may sign in to the service, under ``{p:auth}``."""

    def __init__(self, prefix: str) -> None:
        self.root = f"{{{prefix}:auth}}"
        #: Sorted set: console session id -> expiry (epoch seconds).
        self.sessions = f"{self.root}:sessions"

    def failures(self, client: str) -> str:
        """Hash: failed checks and lockout of ``client`` (an address, or an IPv6 /64)."""
        return f"{self.root}:fail:{client}"


class ApprovalKeys:
    """The pauses' names, under ``{p:ap}`` (the scripts in ``approvals/scripts/`` build the
    per-pause, per-run and per-event names from ``root``): sorted sets of ids ``all`` and
    ``pending`` (by when made), ``due`` (by expiry), ``outbox`` (decided, item not sent yet);
    hash ``counts``: pauses ended since the first run, by how (approved, rejected, ...)."""

    def __init__(self, prefix: str) -> None:
        self.root = root = f"{{{prefix}:ap}}"
        self.all, self.pending, self.due, self.outbox, self.counts = (
            f"{root}:{n}" for n in ("all", "pending", "due", "outbox", "counts")
        )

    def record(self, approval_id: str) -> str:
        """Hash: the pause, its status and decision, and its item's message."""
        return f"{self.root}:a:{approval_id}"

    def run(self, run_id: str) -> str:
        """Set: the ids of a run's pauses."""
        return f"{self.root}:run:{run_id}"

    def event(self, key: str) -> str:
        """Set: the ids of the pending waits on event ``key``."""
        return f"{self.root}:ev:{key}"

    def parked(self, run_id: str) -> str:
        """Hash: index -> pause id of a run's items parked (pending, or not yet sent again)."""
        return f"{self.root}:parked:{run_id}"


def queue_head_key(prefix: str, list_key: str) -> str:
    """Hash, on the broker's Redis: the message at the head of broker list ``list_key`` when
    last seen, and since when."""
    return f"{prefix}:queuehead:{list_key}"


def audit_key(prefix: str) -> str:
    """Stream: each use of a credential."""
    return f"{prefix}:creds:audit"


def firing_key(prefix: str, firing: str) -> str:
    """String: the run a scheduled firing (its beat message's task id) started."""
    return f"{prefix}:sched:{firing}"


def redbeat_prefix(prefix: str) -> str:
    """What redbeat puts before each of its own names (entries, schedule, lock)."""
    return f"{prefix}:redbeat:"


#: Every kind of key agentfleet writes, with its Redis type; docs/keys.md says the rest.
KEYS: tuple[KeyPattern, ...] = kinds(
    """
    p:run:{<id>}                          hash
    p:run:{<id>}:items                    hash
    p:run:{<id>}:inputs                   hash
    p:run:{<id>}:done                     hash
    p:run:{<id>}:recorded                 string
    p:run:{<id>}:events                   stream
    p:run:{<id>}:suspect                  hash
    p:run:{<id>}:counted                  hash
    p:run:{<id>}:spans                    list
    p:run:{<id>}:lanes                    hash
    p:run:{<id>}:undo                     zset
    p:run:{<id>}:undo:data                hash
    p:run:{<id>}:undo:state               hash
    p:out:{<tag>}...                      string
    p:claim:{<tag>}...                    string
    p:mem:{<tag>}...                      hash
    p:errs:{<tag>}...                     list
    p:deliv:{<tag>}...:<task>             string
    p:deliv:{<tag>}...:<task>:<token>     string
    p:deliv:{<tag>}...:<task>:back:<token> string
    p:graph:{<tag>}...                    hash
    p:runs                                zset
    p:runs:active                         set
    p:stats                               hash
    p:stats:done:<second>                 string
    p:stats:min:<minute>                  hash
    {p:rl}:known                          zset
    {p:rl}:<downstream>:pause             string
    {p:rl}:<downstream>:holders           zset
    {p:rl}:<downstream>:hold              string
    {p:rl}:<downstream>:reclaimed         string
    {p:rl}:<downstream>:buckets:<names>   string
    {p:cb}:known                          zset
    {p:cb}:<downstream>                   hash
    {p:cb}:<downstream>:w                 hash
    {p:dlq}:stream                        stream
    {p:dlq}:e:<id>                        hash
    {p:dlq}:a:<id>                        hash
    {p:dlq}:i:<dimension>:<value?>        set
    {p:dlq}:n:<dimension>                 hash
    {p:dlq}:fp                            hash
    {p:dlq}:malformed                     hash
    {p:dlq}:abytes                        string
    p:spend:run:{<id>}                    hash
    p:spend:budget:{<id>}                 string
    p:spend:day:{p:spend:<date>}          hash
    p:spend:day:{p:spend:<date>}:tenants  hash
    p:spend:day:{p:spend:<date>}:alerts   hash
    {p:wk}:workers                        zset
    {p:wk}:worker:<node>                  string
    {p:auth}:fail:<client>                hash
    {p:auth}:sessions                     zset
    {p:ap}:all                            zset
    {p:ap}:pending                        zset
    {p:ap}:due                            zset
    {p:ap}:outbox                         zset
    {p:ap}:counts                         hash
    {p:ap}:a:<id>                         hash
    {p:ap}:run:<id>                       set
    {p:ap}:ev:<key>                       set
    {p:ap}:parked:<id>                    hash
    p:queuehead:<list>                    hash
    p:creds:audit                         stream
    p:sched:<firing>                      string
    """
)
