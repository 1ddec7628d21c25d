"""Dispatch refuses what cannot run, before anything is sent: one error, nothing published.

The workers here are heartbeats written to a real Redis as a worker writes them; the real
worker's own heartbeat is checked in tests/test_dispatch_integration.py.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator, Mapping

import fleet_test_tasks as tt
import pytest
import redis
from celery import Celery
from worker_env import own_queues

from agentfleet import Fleet, fleet_task
from agentfleet.config import Settings, load_settings
from agentfleet.errors import DispatchError
from agentfleet.orchestration.named import start_named
from agentfleet.registry import TaskInfo, WorkerRecord, WorkerRegistry
from agentfleet.tasks.heartbeat import task_catalog

ECHO = TaskInfo(fleet=True, params=("n",), required=("n",))


@pytest.fixture
def settings(redis_url: str, key_prefix: str) -> Settings:
    return load_settings(
        broker_url=redis_url,
        key_prefix=key_prefix,
        queues=own_queues(key_prefix),
        fanouts={"typo": {"task": "fleet_test_tasks.ecoh", "inputs": [{"n": 1}]}},
    )


@pytest.fixture
def fleet(settings: Settings) -> Iterator[Fleet]:
    with Fleet(settings) as made:
        yield made


def _worker(
    settings: Settings,
    tasks: Mapping[str, TaskInfo],
    *,
    queues: tuple[str, ...] | None = None,
    node: str = "w1@test",
) -> None:
    record = WorkerRecord(
        node=node,
        queues=queues if queues is not None else (settings.queues.agents, settings.queues.fanin),
        tasks=dict(tasks),
        task_modules=("fleet_test_tasks",),
        beat_at=time.time(),
    )
    WorkerRegistry.from_settings(settings, redis.Redis.from_url(settings.broker_url)).beat(record)


def _nothing_sent(fleet: Fleet, client: redis.Redis) -> bool:
    return client.llen(fleet.settings.queues.agents) == 0 and fleet.runs() == []


def test_a_plain_celery_task_is_refused_saying_how_to_make_a_fleet_task(fleet: Fleet) -> None:
    app = Celery("plain", set_as_current=False)

    @app.task(name="plain.add")
    def add(x: int, y: int) -> int:
        return x + y

    with pytest.raises(DispatchError, match=r"plain\.add is a plain Celery task; .*@fleet_task"):
        fleet.map(add, [{"x": 1, "y": 2}])


def test_a_bare_function_is_refused(fleet: Fleet) -> None:
    def classify(ctx: object, text: str) -> dict[str, str]:
        return {}

    with pytest.raises(DispatchError, match="is not a fleet task; decorate it with @fleet_task"):
        fleet.map(classify, [{"text": "a"}])


def test_a_task_defined_in_the_script_being_run_is_refused(fleet: Fleet) -> None:
    def shout(ctx: object, text: str) -> dict[str, str]:
        return {"text": text.upper()}

    shout.__module__ = "__main__"
    task = fleet_task(name=f"__main__.shout_{uuid.uuid4().hex[:6]}")(shout)
    with pytest.raises(
        DispatchError, match=r"defined in the script being run \(__main__\).*move it into a module"
    ):
        fleet.map(task, [{"text": "a"}])


def test_an_unknown_task_is_refused_with_the_closest_names_and_nothing_is_sent(
    fleet: Fleet, settings: Settings, redis_client: redis.Redis
) -> None:
    _worker(settings, {"fleet_test_tasks.echo": ECHO, "fleet_test_tasks.sleepy": TaskInfo(fleet=True)})
    with pytest.raises(DispatchError) as refused:
        fleet.map("fleet_test_tasks.ecoh", [{"n": i} for i in range(50)])
    message = str(refused.value)
    assert "no live worker has the task 'fleet_test_tasks.ecoh'" in message
    assert "did you mean fleet_test_tasks.echo?" in message
    assert "theirs: fleet_test_tasks" in message
    assert _nothing_sent(fleet, redis_client)


def test_a_plain_celery_task_registered_by_the_workers_is_refused_by_name(
    fleet: Fleet, settings: Settings, redis_client: redis.Redis
) -> None:
    _worker(settings, {"agentfleet.aggregate": TaskInfo(fleet=False)})
    with pytest.raises(DispatchError, match=r"agentfleet\.aggregate is a plain Celery task"):
        fleet.map("agentfleet.aggregate", [{"run_id": "r"}])
    assert _nothing_sent(fleet, redis_client)


def test_with_no_live_worker_dispatch_is_refused_saying_how_to_start_one(
    fleet: Fleet, redis_client: redis.Redis
) -> None:
    with pytest.raises(DispatchError, match=r"no worker is running.*agentfleet worker.*WAIT_FOR_WORKERS_S"):
        fleet.map("fleet_test_tasks.echo", [{"n": 1}])
    assert _nothing_sent(fleet, redis_client)


def test_a_task_whose_queue_no_live_worker_consumes_is_refused(fleet: Fleet, settings: Settings) -> None:
    _worker(settings, {"fleet_test_tasks.echo": ECHO}, queues=("elsewhere",))
    with pytest.raises(DispatchError, match=r"consumes its queue .*agentfleet worker -Q"):
        fleet.map("fleet_test_tasks.echo", [{"n": 1}])


def test_every_stage_of_a_pipeline_must_have_a_live_worker(fleet: Fleet, settings: Settings) -> None:
    _worker(settings, {"fleet_test_tasks.echo": ECHO})
    with pytest.raises(DispatchError, match=r"no live worker has the task 'fleet_test_tasks\.missing'"):
        fleet.pipeline(["fleet_test_tasks.echo", "fleet_test_tasks.missing"], [{"n": 1}])


def test_dispatch_waits_for_a_worker_that_is_starting(fleet: Fleet, settings: Settings) -> None:
    starting = threading.Timer(0.5, _worker, args=(settings, {"fleet_test_tasks.echo": ECHO}))
    starting.start()
    try:
        run = fleet.map("fleet_test_tasks.echo", [{"n": 1}], wait_for_workers_s=10)
    finally:
        starting.join()
    assert run.total == 1


def test_without_waiting_a_worker_that_is_still_starting_is_not_waited_for(fleet: Fleet) -> None:
    started = time.monotonic()
    with pytest.raises(DispatchError, match="no worker is running"):
        fleet.map("fleet_test_tasks.echo", [{"n": 1}])
    assert time.monotonic() - started < 5


def test_a_gone_worker_does_not_count_once_its_heartbeat_expired(redis_url: str, key_prefix: str) -> None:
    registry = WorkerRegistry(
        redis.Redis.from_url(redis_url, decode_responses=True), prefix=key_prefix, ttl_s=0.3
    )
    registry.beat(WorkerRecord(node="w@x", queues=("q",), tasks={"t": ECHO}))
    assert [r.node for r in registry.live()] == ["w@x"]
    time.sleep(0.5)
    assert registry.live() == []


def test_a_worker_that_shuts_down_leaves_the_registry_at_once(redis_url: str, key_prefix: str) -> None:
    registry = WorkerRegistry(redis.Redis.from_url(redis_url, decode_responses=True), prefix=key_prefix)
    registry.beat(WorkerRecord(node="w@x", queues=("q",), tasks={"t": ECHO}))
    registry.remove("w@x")
    assert registry.live() == []


def test_inputs_are_validated_against_the_task_object_before_anything_is_sent(
    fleet: Fleet, settings: Settings, redis_client: redis.Redis
) -> None:
    _worker(settings, {tt.echo.name: ECHO})
    inputs = [{"n": i} for i in range(10)] + [{"n": "seven"}, {"m": 1}]
    with pytest.raises(DispatchError) as refused:
        fleet.map(tt.echo, inputs)
    message = str(refused.value)
    assert message.startswith("2 of 12 inputs do not fit fleet_test_tasks.echo")
    assert "input 10: n: Input should be a valid integer" in message
    assert "input 11: n: Field required; m: Extra inputs are not permitted" in message
    assert _nothing_sent(fleet, redis_client)


def test_a_task_named_by_string_is_checked_against_the_parameters_its_workers_registered(
    fleet: Fleet, settings: Settings, redis_client: redis.Redis
) -> None:
    _worker(settings, {"fleet_test_tasks.echo": ECHO})
    with pytest.raises(DispatchError, match=r"input 0: n: missing; txt: not a parameter \(it takes: n\)"):
        fleet.map("fleet_test_tasks.echo", [{"txt": "a"}])
    assert _nothing_sent(fleet, redis_client)


def test_a_bad_input_is_named_among_many_and_the_rest_counted(fleet: Fleet, settings: Settings) -> None:
    _worker(settings, {"fleet_test_tasks.echo": ECHO})
    with pytest.raises(DispatchError, match=r"^9 of 9 inputs .*\(and 4 more\)$"):
        fleet.map("fleet_test_tasks.echo", [{"m": i} for i in range(9)])


def test_an_input_over_the_size_limit_is_refused_saying_how_to_pass_it(
    settings: Settings, redis_client: redis.Redis
) -> None:
    small = settings.model_copy(
        update={"dispatch": settings.dispatch.model_copy(update={"max_input_bytes": 2048})}
    )
    _worker(settings, {"fleet_test_tasks.echo": ECHO})
    with Fleet(small) as fleet:
        with pytest.raises(
            DispatchError, match=r"input 1 is 3 KiB of JSON, over dispatch.max_input_bytes \(2 KiB\)"
        ):
            fleet.map("fleet_test_tasks.echo", [{"n": 1}, {"n": 2, "pad": "x" * 3000}])
        assert _nothing_sent(fleet, redis_client)


def test_the_default_input_limit_refuses_ten_megabytes(fleet: Fleet, settings: Settings) -> None:
    _worker(settings, {"fleet_test_tasks.echo": ECHO})
    with pytest.raises(DispatchError, match=r"input 0 is 10\.0 MiB of JSON, over .* \(1\.0 MiB\)"):
        fleet.map("fleet_test_tasks.echo", [{"n": 1, "text": "x" * 10 * 1024 * 1024}])


def test_a_named_fanout_of_an_unknown_task_is_refused_as_a_schedule_would_start_it(
    fleet: Fleet, settings: Settings, redis_client: redis.Redis
) -> None:
    _worker(settings, {"fleet_test_tasks.echo": ECHO})
    with pytest.raises(DispatchError, match=r"did you mean fleet_test_tasks\.echo"):
        start_named(fleet, "typo")
    assert _nothing_sent(fleet, redis_client)


def test_with_require_workers_off_work_is_queued_for_workers_that_come_later(
    settings: Settings, redis_client: redis.Redis
) -> None:
    off = settings.model_copy(
        update={"dispatch": settings.dispatch.model_copy(update={"require_workers": False})}
    )
    with Fleet(off) as fleet:
        run = fleet.map("fleet_test_tasks.echo", [{"n": 1}])
    assert run.total == 1
    assert redis_client.llen(settings.queues.agents) == 1


def test_a_worker_publishes_each_fleet_task_with_its_parameters() -> None:
    app = Celery("plain", set_as_current=False)

    @app.task(name="plain.total")
    def total(x: int, y: int) -> int:
        return x + y

    catalog = task_catalog({tt.sleepy.name: tt.sleepy, tt.counted.name: tt.counted, "plain.total": total})
    assert catalog[tt.sleepy.name] == TaskInfo(fleet=True, params=("n", "sleep_s"), required=("n", "sleep_s"))
    assert catalog[tt.counted.name] == TaskInfo(fleet=True, params=("token", "sleep_s"), required=("token",))
    assert catalog["plain.total"] == TaskInfo(fleet=False)
