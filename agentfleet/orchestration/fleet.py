"""``Fleet``: fan work out with Celery groups, chords and chains, one level deep."""

from __future__ import annotations

import functools
import logging
import random
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from celery.canvas import Signature

from agentfleet.celery_config import make_app
from agentfleet.config import Settings, get_settings
from agentfleet.errors import BrokerUnavailable, DispatchError
from agentfleet.idempotency import default_item_key
from agentfleet.models import RunSummary
from agentfleet.orchestration.admission import Stage, admit_inputs, require_fit, require_workers, stage_of
from agentfleet.orchestration.client_app import DispatchApp
from agentfleet.orchestration.dead_letters import DeadLetterQueue
from agentfleet.orchestration.graph import Node, graph_spec
from agentfleet.orchestration.options import batching, run_budget, tenancy
from agentfleet.orchestration.run import Run
from agentfleet.outages import patient, ride_out
from agentfleet.redaction import Redactor
from agentfleet.redis_client import connect
from agentfleet.references import callable_path
from agentfleet.registry import TaskInfo, WorkerRegistry
from agentfleet.runs import RunStore
from agentfleet.runs.lookup import runs_starting_with
from agentfleet.spend import SpendLedger
from agentfleet.tasks.batch import batch_signatures
from agentfleet.tasks.graph import step_meta, step_signature
from agentfleet.tasks.meta import ItemMeta
from agentfleet.tasks.redispatch import aggregate_signature, item_signature
from agentfleet.tasks.retry_policy import cap_countdown

__all__ = ["Fleet", "TaskRef"]

log = logging.getLogger("agentfleet.fleet")
T = TypeVar("T")
TaskRef = Any  # a fleet task object, or a registered task name
KeyFn = Callable[[Mapping[str, Any]], Any]


def _callable_path(fn: Callable[..., Any] | str) -> str:
    """The aggregate's ``module:qualname``, imported here so a wrong one fails before any item runs."""
    try:
        return callable_path(fn)
    except DispatchError as exc:
        raise DispatchError(f"aggregate {exc}") from None


class Fleet:
    """Dispatches runs to the broker in ``settings`` (from env and ``agentfleet.toml``)."""

    def __init__(self, settings: Settings | None = None, *, broker_url: str | None = None) -> None:
        settings = settings or get_settings()
        if broker_url is not None:
            settings = settings.model_copy(update={"broker_url": broker_url, "result_backend": None})
        self.settings = settings
        self.app = make_app(settings, main="agentfleet", app_cls=DispatchApp)
        self.store = RunStore.from_settings(settings, connect(settings.redis_target()))

    # Public API ----------------------------------------------------------------------------

    def map(
        self,
        task: TaskRef,
        inputs: Iterable[Mapping[str, Any]],
        *,
        name: str | None = None,
        key: KeyFn | None = None,
        aggregate: Callable[..., Any] | str | None = None,
        stagger_s: float = 0.0,
        fail_fast: bool | None = None,
        max_in_flight: int | None = None,
        tenant: str | None = None,
        budget_usd: float | None = None,
        batch_size: int | None = None,
        wait_for_workers_s: float | None = None,
    ) -> Run:
        """Run ``task`` once per input, in parallel; with ``aggregate``, fan in once all are done.

        ``key`` maps an input to its idempotency key (default: run id, index and input hash).
        ``aggregate`` (a module-level function, or its ``module:name``) runs once on the list
        of successful results in input order. ``stagger_s`` spreads the starts over that many
        seconds, with jitter. ``fail_fast`` cancels the rest of the run at the first failure.
        ``max_in_flight`` makes the run a pool: at most that many of its items execute at
        once, across the cluster, whatever the workers' sizes (the others wait in the queue
        without using retries). ``tenant`` labels the run for the tenant's daily budget;
        ``budget_usd`` caps the run's spending in US dollars (default ``budgets.run_usd``).
        ``batch_size`` packs that many consecutive items into one message and execution,
        each keeping its own outcome, idempotency and dead letter.

        Nothing is sent unless every input fits the task and a live worker has it (waiting up
        to ``wait_for_workers_s`` seconds, default ``dispatch.wait_for_workers_s``, for workers
        that are starting): a mistake is one ``DispatchError``, not a dead letter per item.
        """
        stage = stage_of(task, self.settings.queues.agents)
        fn = _callable_path(aggregate) if aggregate is not None else None
        items = admit_inputs(inputs, max_bytes=self.settings.dispatch.max_input_bytes)
        shared, cap, batched = tenancy(tenant), run_budget(budget_usd), batching(batch_size)
        catalog = self._admit_stages([stage], wait_for_workers_s)
        require_fit(items, stage, catalog.get(stage.name))
        task_name, queue = stage.name, stage.queue
        run_id = self._new_run_id()
        metas = self._metas(run_id, items, key, stages=1, max_in_flight=max_in_flight, **shared)
        label = name or task_name
        fail_fast = self.settings.fail_fast if fail_fast is None else fail_fast
        extra = {**shared, **batched}
        self._create_run(run_id, label, "map", [task_name], [queue], metas, items, fn, fail_fast, extra)
        self._set_budget(run_id, cap)
        if batch_size:
            countdowns = self._stagger(-(-len(items) // batch_size), stagger_s)
            sigs = batch_signatures(
                self.app,
                task=task_name,
                queue=queue,
                metas=metas,
                inputs=items,
                size=batch_size,
                countdowns=countdowns,
                redactor=self._redactor,
            )
        else:
            sigs = [
                item_signature(
                    self.app,
                    names=[task_name],
                    queues=[queue],
                    meta=meta,
                    inputs=item,
                    countdown_s=c,
                    redactor=self._redactor,
                )
                for item, meta, c in zip(items, metas, self._stagger(len(items), stagger_s), strict=True)
            ]
        if not sigs and fn is not None:
            sigs = [aggregate_signature(self.app, run_id, fn, self.settings.queues.fanin)]
        self._publish(run_id, sigs)
        return self._run(run_id, label, len(items))

    def pipeline(
        self,
        stages: Sequence[TaskRef],
        inputs: Iterable[Mapping[str, Any]],
        *,
        name: str | None = None,
        key: KeyFn | None = None,
        stagger_s: float = 0.0,
        max_in_flight: int | None = None,
        tenant: str | None = None,
        budget_usd: float | None = None,
        wait_for_workers_s: float | None = None,
    ) -> Run:
        """Run the stages in order for each item, the items in parallel (a chain per item).

        Each stage returns a dict, the next stage's keyword input; an item's outcome carries
        the last stage's result. A failed stage ends that item with a failed outcome.
        ``max_in_flight``, ``tenant``, ``budget_usd`` and ``wait_for_workers_s`` are as in
        ``map``; the inputs are checked against the first stage, every stage against the live
        workers.
        """
        if not stages:
            raise DispatchError("a pipeline needs at least one stage")
        planned = [stage_of(stage, self.settings.queues.agents) for stage in stages]
        items = admit_inputs(inputs, max_bytes=self.settings.dispatch.max_input_bytes)
        shared, cap = tenancy(tenant), run_budget(budget_usd)
        catalog = self._admit_stages(planned, wait_for_workers_s)
        require_fit(items, planned[0], catalog.get(planned[0].name))
        names = [stage.name for stage in planned]
        queues = [stage.queue for stage in planned]
        run_id = self._new_run_id()
        metas = self._metas(run_id, items, key, stages=len(names), max_in_flight=max_in_flight, **shared)
        label = name or " -> ".join(names)
        self._create_run(run_id, label, "pipeline", names, queues, metas, items, None, False, shared)
        self._set_budget(run_id, cap)
        sigs = [
            item_signature(
                self.app,
                names=names,
                queues=queues,
                meta=meta,
                inputs=item,
                countdown_s=c,
                redactor=self._redactor,
            )
            for item, meta, c in zip(items, metas, self._stagger(len(items), stagger_s), strict=True)
        ]
        self._publish(run_id, sigs)
        return self._run(run_id, label, len(items))

    def graph(
        self,
        nodes: Sequence[Node],
        inputs: Iterable[Mapping[str, Any]],
        *,
        name: str | None = None,
        key: KeyFn | None = None,
        aggregate: Callable[..., Any] | str | None = None,
        stagger_s: float = 0.0,
        fail_fast: bool | None = None,
        max_in_flight: int | None = None,
        tenant: str | None = None,
        budget_usd: float | None = None,
        wait_for_workers_s: float | None = None,
    ) -> Run:
        """Run a graph of steps per input: each ``Node`` runs once the steps it names in
        ``after`` have succeeded, independent steps in parallel (see ``orchestration/graph.py``).

        A failed step skips the steps that depend on it (recorded as ``skipped``) while the
        other branches finish; the item's outcome carries every step's status and the
        succeeded steps' results by name. The other options are as in ``map``; every step's
        task is checked against the live workers.
        """
        planned = [stage_of(n.task, self.settings.queues.agents) for n in nodes]
        spec = graph_spec([(n.name, s.name, s.queue, n.after) for n, s in zip(nodes, planned, strict=True)])
        fn = _callable_path(aggregate) if aggregate is not None else None
        items = admit_inputs(inputs, max_bytes=self.settings.dispatch.max_input_bytes)
        shared, cap = tenancy(tenant), run_budget(budget_usd)
        self._admit_stages(planned, wait_for_workers_s)
        run_id = self._new_run_id()
        metas = self._metas(run_id, items, key, stages=1, max_in_flight=max_in_flight, **shared)
        label = name or "graph " + ", ".join(spec.names)
        fail_fast = self.settings.fail_fast if fail_fast is None else fail_fast
        tasks, queues = [s.task for s in spec.steps], [s.queue for s in spec.steps]
        extra = {**shared, "graph": spec.to_json()}
        self._create_run(run_id, label, "graph", tasks, queues, metas, items, fn, fail_fast, extra)
        self._set_budget(run_id, cap)
        sigs = [
            step_signature(self.app, spec, step_meta(meta, root.name), countdown_s=c, redactor=self._redactor)
            for meta, c in zip(metas, self._stagger(len(items), stagger_s), strict=True)
            for root in spec.roots
        ]
        if not sigs and fn is not None:
            sigs = [aggregate_signature(self.app, run_id, fn, self.settings.queues.fanin)]
        self._publish(run_id, sigs)
        return self._run(run_id, label, len(items))

    @functools.cached_property
    def dlq(self) -> DeadLetterQueue:
        """The dead-letter queue on this fleet's Redis: list, stats, requeue, purge, export."""
        return DeadLetterQueue(self.settings, app=self.app, runs=self.store)

    def get_run(self, run_id: str) -> Run:
        """A handle on an existing run, named by its id or the first characters of it.

        Raises ``DispatchError`` when no run has that id, or several begin with it.
        """
        record = self.store.get_run(run_id)
        if not record:
            run_id = self._unique_run(run_id)
            record = self.store.get_run(run_id)
        return self._run(run_id, record.get("name", ""), int(record.get("tasks_total", 0)))

    def runs(self, limit: int = 20) -> list[RunSummary]:
        """The newest runs, newest first."""
        return self.store.list_runs(limit)

    def ping_workers(self, timeout_s: float = 1.0) -> list[str]:
        """Names of the workers that answered a ping within ``timeout_s`` seconds."""
        replies = self.app.control.ping(timeout=timeout_s) or []
        return sorted(name for reply in replies for name in reply)

    def close(self) -> None:
        self.app.close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Internals -----------------------------------------------------------------------------

    def _admit_stages(self, stages: Sequence[Stage], wait_s: float | None) -> dict[str, TaskInfo]:
        """What live workers registered of the stages' tasks; ``DispatchError`` when one has
        no live worker (unless ``dispatch.require_workers`` is off: then nothing is known)."""
        dispatch = self.settings.dispatch
        if not dispatch.require_workers:
            return {}
        registry = patient(
            WorkerRegistry.from_settings(self.settings, self.store.client),
            budget_s=self.settings.delivery.client_outage_s,
            url=self.settings.broker_url,
        )
        wait = dispatch.wait_for_workers_s if wait_s is None else wait_s
        return require_workers(registry, stages, wait_s=wait)

    def _unique_run(self, start: str) -> str:
        found = runs_starting_with(self.store.client, f"{self.settings.key_prefix}:runs", start, limit=6)
        if len(found) == 1:
            return found[0]
        if not found:
            raise DispatchError(f"no run {start} (it may have expired)")
        shown = ", ".join(found[:5]) + (" ..." if len(found) > 5 else "")
        raise DispatchError(f"{start} is the start of several runs ({shown}); give more of the id")

    @staticmethod
    def _new_run_id() -> str:
        return uuid.uuid4().hex[:16]

    @functools.cached_property
    def _redactor(self) -> Redactor:
        return self.settings.redactor()

    def _run(self, run_id: str, name: str, total: int) -> Run:
        outage_s = self.settings.delivery.client_outage_s
        store = patient(self.store, budget_s=outage_s, url=self.settings.broker_url)
        return Run(
            run_id, store=store, app=self.app, total=total, name=name, fanin=self.settings.queues.fanin
        )

    def _stagger(self, count: int, stagger_s: float) -> list[float]:
        if stagger_s <= 0 or count == 0:
            return [0.0] * count
        step = stagger_s / count
        cap = self.settings.max_countdown_s
        return [cap_countdown(i * step + random.uniform(0, step * 0.5), cap) for i in range(count)]

    @staticmethod
    def _metas(
        run_id: str,
        items: list[dict[str, Any]],
        key: KeyFn | None,
        *,
        stages: int,
        max_in_flight: int | None = None,
        **shared: Any,
    ) -> list[ItemMeta]:
        """Each item's meta; ``shared`` are ``ItemMeta`` fields every item of the run carries."""
        if max_in_flight is not None and max_in_flight < 1:
            raise DispatchError("max_in_flight must be at least 1")
        metas = []
        for i, item in enumerate(items):
            if key is not None:
                custom = str(key(item))
                metas.append(
                    ItemMeta(
                        run=run_id,
                        idx=i,
                        key=custom,
                        item=custom,
                        stages=stages,
                        max_in_flight=max_in_flight,
                        **shared,
                    )
                )
            else:
                metas.append(
                    ItemMeta(
                        run=run_id,
                        idx=i,
                        key=default_item_key(run_id, i, item),
                        item=str(i),
                        stages=stages,
                        max_in_flight=max_in_flight,
                        **shared,
                    )
                )
        if key is not None:
            keys = [m.key for m in metas]
            if len(set(keys)) != len(keys):
                raise DispatchError("key= returned the same key for two inputs of one run")
        return metas

    def _create_run(
        self,
        run_id: str,
        name: str,
        kind: str,
        tasks: list[str],
        queues: list[str],
        metas: list[ItemMeta],
        items: list[dict[str, Any]],
        aggregate: str | None,
        fail_fast: bool,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Write the run record first: whatever is not published afterwards, the reconciler
        publishes from it. ``extra``: more fields of the run's record."""
        self._patiently(
            lambda: self.store.create_run(
                run_id,
                name=name,
                kind=kind,
                task=",".join(tasks),
                items=[(m.task_id, m.key, m.item) for m in metas],
                inputs=items,
                queues=queues,
                aggregate=aggregate,
                fail_fast=fail_fast,
                max_in_flight=metas[0].max_in_flight if metas else None,
                extra=extra,
            )
        )

    def _set_budget(self, run_id: str, budget_usd: float | None) -> None:
        """Give the run its own dollar cap in the spend ledger, before any of its items runs."""
        if budget_usd is not None:
            ledger = SpendLedger.from_settings(self.settings, self.store.client)
            self._patiently(lambda: ledger.set_budget(run_id, budget_usd))

    def _publish(self, run_id: str, sigs: Sequence[Signature]) -> None:
        """Send every message, riding out broker outages of ``delivery.client_outage_s``.

        Past that, the rest is left to the reconciler (the run record names every item and
        keeps its input), and the run goes on once Redis is back.
        """
        sent = 0
        try:
            with self.app.producer_or_acquire() as producer:
                for sig in sigs:
                    self._patiently(functools.partial(sig.apply_async, producer=producer))
                    sent += 1
        except BrokerUnavailable as exc:
            log.warning(
                "run %s: %d of %d messages sent before %s; the reconciler sends the rest once Redis answers",
                run_id,
                sent,
                len(sigs),
                exc,
            )

    def _patiently(self, call: Callable[[], T]) -> T:
        return ride_out(call, budget_s=self.settings.delivery.client_outage_s, url=self.settings.broker_url)
