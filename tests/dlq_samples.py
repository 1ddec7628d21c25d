"""Dead letters made by hand, for tests of the store, the CLI, stats and the digest."""

from __future__ import annotations

import time
import uuid
from typing import Any

from agentfleet.dlq import AttemptRecord, DeadLetter, dead_letter_id, error_fingerprint
from agentfleet.idempotency import stage_key
from agentfleet.models import TaskOutcome
from agentfleet.orchestration import Fleet
from agentfleet.registry import TaskInfo, WorkerRecord, WorkerRegistry

# The task names sample entries use: a live worker registers them (requeue sends only those).
SAMPLE_TASKS = ("tests.fetch", "tests.extract", "tests.report")


def register_worker(client: Any, prefix: str, queue: str, names: tuple[str, ...] = SAMPLE_TASKS) -> None:
    """A live worker's heartbeat, registering ``names`` as fleet tasks (for ten minutes)."""
    record = WorkerRecord(
        node=f"sample-{uuid.uuid4().hex[:6]}@test",
        queues=(queue,),
        tasks={name: TaskInfo(fleet=True) for name in names},
    )
    WorkerRegistry(client, prefix=prefix, ttl_s=600).beat(record)


def sample_entry(**overrides: Any) -> DeadLetter:
    """A plausible dead letter of a map item; every field can be overridden."""
    run_id = overrides.pop("run_id", uuid.uuid4().hex[:16])
    index = overrides.pop("index", 0)
    key = overrides.pop("idempotency_key", f"{run_id}:{index}:{uuid.uuid4().hex[:16]}")
    error_type = overrides.pop("error_type", "DownstreamError")
    error = overrides.pop("error", "HTTP 503 from vendor-a.example")
    now = overrides.pop("dead_lettered_at", time.time())
    fields: dict[str, Any] = {
        "id": dead_letter_id(key, overrides.get("stage", 0)),
        "task_name": "tests.fetch",
        "task_id": f"{run_id}-{index}",
        "run_id": run_id,
        "item_key": str(index),
        "index": index,
        "idempotency_key": key,
        "inputs": {"url": "https://vendor-a.example/items/1"},
        "error_type": error_type,
        "error": error,
        "category": "downstream_error",
        "fingerprint": error_fingerprint(error_type, error),
        "status_code": 503,
        "downstream": "vendor-a.example",
        "attempts": 1,
        "errors": [
            AttemptRecord(
                attempt=1, error_type=error_type, category="downstream_error", message=error, at=now
            )
        ],
        "first_failure_at": now,
        "last_failure_at": now,
        "dead_lettered_at": now,
        "worker": "af1@test",
    }
    fields.update(overrides)
    return DeadLetter(**fields)


def dead_item(fleet: Fleet, *, registered: bool = True, **entry_fields: Any) -> DeadLetter:
    """A one-item run whose item failed for good, with its dead letter; with ``registered``, a
    live worker has its task(s)."""
    run_id = uuid.uuid4().hex[:16]
    entry = sample_entry(run_id=run_id, **entry_fields)
    if registered:
        names = tuple(dict.fromkeys([*SAMPLE_TASKS, entry.task_name, *entry.stage_tasks]))
        register_worker(fleet.store.client, fleet.settings.key_prefix, fleet.settings.queues.agents, names)
    fleet.store.create_run(
        run_id,
        name="t",
        kind="map",
        task=entry.task_name,
        items=[(entry.task_id, entry.idempotency_key, "0")],
    )
    fleet.store.finish(
        TaskOutcome(
            task_id=entry.task_id,
            run_id=run_id,
            item_key="0",
            ok=False,
            error_type=entry.error_type,
            error=entry.error,
            dead_lettered=True,
            idempotency_key=stage_key(entry.idempotency_key, entry.stage, entry.stages),
        )
    )
    fleet.dlq.store.add(entry)
    return entry
