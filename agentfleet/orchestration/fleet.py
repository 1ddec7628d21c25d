"""``Fleet``: fan work out with Celery groups, chords and chains, one level deep."""

from __future__ import annotations

import functools
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from typing import Any, Unpack

from agentfleet.approvals import Approval, ApprovalStatus, ApprovalStore
from agentfleet.celery_config import make_app
from agentfleet.config import Settings, get_settings
from agentfleet.config.options import RunOptionArgs, RunOptions, run_options, unknown_option
from agentfleet.errors import DispatchError
from agentfleet.models import RunSummary
from agentfleet.orchestration.admission import Stage, admit_inputs, require_fit, require_workers, stage_of
from agentfleet.orchestration.dead_letters import DeadLetterQueue
from agentfleet.orchestration.dispatch import Admit, Dispatcher, DispatchProgress, RunPlan, Signatures
from agentfleet.orchestration.graph import Node, graph_spec
from agentfleet.orchestration.priority import run_priority
from agentfleet.orchestration.run import Run
from agentfleet.orchestration.signatures import batches, chains, graph_roots, stagger
from agentfleet.outages import Patience
from agentfleet.redaction import Redactor
from agentfleet.redis_client import broker_client, state_client
from agentfleet.references import callable_path
from agentfleet.registry import TaskInfo, WorkerRegistry
from agentfleet.runs import RunStore
from agentfleet.runs.lookup import runs_starting_with
from agentfleet.spend import SpendLedger
from agentfleet.transport import enabled
from agentfleet.transport.results import dispatch_app_class

__all__ = ["Fleet", "Progress", "TaskRef"]

log = logging.getLogger("agentfleet.fleet")
TaskRef = Any  # a fleet task object, or a registered task name
KeyFn = Callable[[Mapping[str, Any]], Any]
Progress = Callable[[DispatchProgress], None]


def _resolved(method: str, options: RunOptions | None, given: Mapping[str, Any]) -> RunOptions:
    """The run options of a call: ``options`` with the keyword arguments on top."""
    for name in given:
        if name not in RunOptions.model_fields:
            raise TypeError(f"Fleet.{method}() got an unexpected keyword argument: {unknown_option(name)}")
    return run_options(options, **given)


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
        self.app = make_app(settings, main="agentfleet", app_cls=dispatch_app_class())
        self.store = RunStore.from_settings(settings, state_client(settings))
        # The broker's own Redis (its queues), which ``state_url`` may put apart from the store.
        self.broker = broker_client(settings)

    # Public API ----------------------------------------------------------------------------

    def map(
        self,
        task: TaskRef,
        inputs: Iterable[Mapping[str, Any]],
        *,
        key: KeyFn | None = None,
        options: RunOptions | None = None,
        progress: Progress | None = None,
        wait_for_workers_s: float | None = None,
        **run_options: Unpack[RunOptionArgs],
    ) -> Run:
        """Run ``task`` once per input, in parallel; with an ``aggregate``, fan in once all are done.

        ``inputs`` is any iterable of keyword-argument dicts, a generator of millions included:
        it is read, recorded and sent a chunk at a time, waiting while the queue is full, and
        ``progress`` hears how far it got (see ``orchestration/dispatch.py``); this returns once
        every item is sent.
        ``key`` maps an input to its idempotency key (default: run id, index and input hash).
        The run options (``name``, ``aggregate``, ``stagger_s``, ``fail_fast``,
        ``max_in_flight``, ``tenant``, ``budget_usd``, ``batch_size``, ``priority``; each is
        documented on ``RunOptions``, ``config/options.py``) are keyword arguments, or
        ``options=RunOptions(...)`` with keyword arguments on top of it.

        Nothing is sent unless the options hold, the inputs fit the task and a live worker has
        it (waiting up to ``wait_for_workers_s`` seconds, default
        ``dispatch.wait_for_workers_s``, for workers that are starting): a mistake is one
        ``DispatchError``, not a dead letter per item. A mistake in a later chunk of a long
        stream stops the dispatch (see ``dispatch.py``).
        """
        opts = _resolved("map", options, run_options)
        stage = stage_of(task, self.settings.queues.agents)
        task_name, queue, batch_size, stagger_s = stage.name, stage.queue, opts.batch_size, opts.stagger_s
        admit = self._admission([stage], stage, wait_for_workers_s)
        inputs, size = self._sized(inputs, stagger_s)
        plan = self._plan(
            "map",
            opts,
            size,
            label=task_name,
            names=[task_name],
            queues=[queue],
            key=key,
            extra={"batch_size": batch_size} if batch_size else {},
            fast=not batch_size and stagger_s <= 0 and enabled("stamped_dispatch"),
        )
        signatures: Signatures | None = None
        chunk = self.settings.dispatch.chunk_items
        if batch_size:
            starts = self._stagger(-(-size // batch_size), stagger_s)
            chunk = max(batch_size, chunk // batch_size * batch_size)
            signatures = batches(self.app, plan, batch_size, starts, self._redactor)
        elif not plan.fast:
            signatures = chains(self.app, plan, self._stagger(size, stagger_s), self._redactor)
        total = self._dispatcher.dispatch(
            plan, inputs, admit=admit, signatures=signatures, chunk_items=chunk, progress=progress
        )
        return self._run(plan.run_id, plan.label, total)

    def pipeline(
        self,
        stages: Sequence[TaskRef],
        inputs: Iterable[Mapping[str, Any]],
        *,
        key: KeyFn | None = None,
        options: RunOptions | None = None,
        progress: Progress | None = None,
        wait_for_workers_s: float | None = None,
        **run_options: Unpack[RunOptionArgs],
    ) -> Run:
        """Run the stages in order for each item, the items in parallel (a chain per item).

        Each stage returns a dict, the next stage's keyword input; an item's outcome carries
        the last stage's result (the aggregate's input). A failed stage ends that item with a
        failed outcome. The inputs are checked against the first stage, every stage against
        the live workers; the other arguments and the run options are as in ``map``, but for
        ``batch_size``.
        """
        opts = _resolved("pipeline", options, run_options)
        if not stages:
            raise DispatchError("a pipeline needs at least one stage")
        planned = [stage_of(stage, self.settings.queues.agents) for stage in stages]
        names = [stage.name for stage in planned]
        admit = self._admission(planned, planned[0], wait_for_workers_s)
        inputs, size = self._sized(inputs, opts.stagger_s)
        plan = self._plan(
            "pipeline",
            opts,
            size,
            label=" -> ".join(names),
            names=names,
            queues=[stage.queue for stage in planned],
            key=key,
            stages=len(names),
        )
        items = chains(self.app, plan, self._stagger(size, opts.stagger_s), self._redactor)
        total = self._dispatcher.dispatch(plan, inputs, admit=admit, signatures=items, progress=progress)
        return self._run(plan.run_id, plan.label, total)

    def graph(
        self,
        nodes: Sequence[Node],
        inputs: Iterable[Mapping[str, Any]],
        *,
        key: KeyFn | None = None,
        options: RunOptions | None = None,
        progress: Progress | None = None,
        wait_for_workers_s: float | None = None,
        **run_options: Unpack[RunOptionArgs],
    ) -> Run:
        """Run a graph of steps per input: each ``Node`` runs once the steps it names in
        ``after`` have succeeded, independent steps in parallel (see ``orchestration/graph.py``).

        A failed step skips the steps that depend on it (recorded as ``skipped``) while the
        other branches finish; the item's outcome carries every step's status and the
        succeeded steps' results by name. The other arguments and the run options are as in
        ``map``, but for ``batch_size``.
        """
        opts = _resolved("graph", options, run_options)
        planned = [stage_of(n.task, self.settings.queues.agents) for n in nodes]
        spec = graph_spec([(n.name, p.name, p.queue, n.after) for n, p in zip(nodes, planned, strict=True)])
        admit = self._admission(planned, None, wait_for_workers_s)
        inputs, size = self._sized(inputs, opts.stagger_s)
        plan = self._plan(
            "graph",
            opts,
            size,
            label="graph " + ", ".join(spec.names),
            names=[s.task for s in spec.steps],
            queues=[s.queue for s in spec.steps],
            key=key,
            extra={"graph": spec.to_json()},
        )
        roots = graph_roots(self.app, spec, self._stagger(size, opts.stagger_s), self._redactor)
        total = self._dispatcher.dispatch(plan, inputs, admit=admit, signatures=roots, progress=progress)
        return self._run(plan.run_id, plan.label, total)

    @functools.cached_property
    def dlq(self) -> DeadLetterQueue:
        """The dead-letter queue on this fleet's Redis: list, stats, requeue, purge, export."""
        return DeadLetterQueue(self.settings, app=self.app, runs=self.store)

    @functools.cached_property
    def approval_store(self) -> ApprovalStore:
        """The pauses on this fleet's Redis; a decision sends its item again through this app."""
        return ApprovalStore.from_settings(self.settings, self.store.client, app=self.app)

    def approvals(self, run: str | None = None, status: ApprovalStatus | None = "pending") -> list[Approval]:
        """Pauses (approvals and event waits), newest first: of run ``run`` (None: every
        run) and of ``status`` (None: any)."""
        return self.approval_store.list(run, status, limit=None)

    def approve(
        self, approval_id: str, *, by: str | None = None, comment: str | None = None, data: Any = None
    ) -> Approval:
        """Approve ``approval_id`` (``data``: JSON the paused call gets back, edited arguments
        say); its item resumes. ``ApprovalAlreadyDecided`` / ``ApprovalExpired`` when the first
        decision or the timeout stands."""
        return self.approval_store.decide(approval_id, approved=True, by=by, comment=comment, data=data)

    def reject(self, approval_id: str, *, by: str | None = None, comment: str | None = None) -> Approval:
        """Reject ``approval_id``; its item resumes with a rejection (as ``approve``)."""
        return self.approval_store.decide(approval_id, approved=False, by=by, comment=comment)

    def send_event(self, key: str, data: Any = None) -> int:
        """Complete every item waiting on event ``key`` with ``data`` (JSON); returns how many."""
        return self.approval_store.send_event(key, data)

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
        """The newest runs, newest first; ``waiting_approval`` counts each run's parked items
        (one read per run, all in one round trip; ``waiting_approval_ids`` stays empty here)."""
        summaries = self.store.list_runs(limit)
        counts = self.approval_store.parked_counts([s.run_id for s in summaries])
        return [
            s.model_copy(update={"waiting_approval": counts[s.run_id]}) if counts.get(s.run_id) else s
            for s in summaries
        ]

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

    def _admission(self, stages: Sequence[Stage], first: Stage | None, wait_s: float | None) -> Admit:
        """A chunk's check: JSON objects under ``dispatch.max_input_bytes``; then, at the first
        chunk, a live worker for every stage (so a malformed input is named before a missing
        worker); then that they fit ``first`` (when given: a graph's steps read their inputs
        when they run)."""
        max_bytes = self.settings.dispatch.max_input_bytes
        catalog: list[dict[str, TaskInfo]] = []

        def admit(chunk: list[Any], start: int) -> list[dict[str, Any]]:
            items = admit_inputs(chunk, max_bytes=max_bytes, start=start)
            if not catalog:
                catalog.append(self._admit_stages(stages, wait_s))
            if first is not None:
                require_fit(items, first, catalog[0].get(first.name), start=start)
            return items

        return admit

    def _admit_stages(self, stages: Sequence[Stage], wait_s: float | None) -> dict[str, TaskInfo]:
        """What live workers registered of the stages' tasks; ``DispatchError`` when one has
        no live worker (unless ``dispatch.require_workers`` is off: then nothing is known)."""
        dispatch = self.settings.dispatch
        if not dispatch.require_workers:
            return {}
        registry = self._patience.wrap(WorkerRegistry.from_settings(self.settings, self.store.client))
        wait = dispatch.wait_for_workers_s if wait_s is None else wait_s
        return require_workers(registry, stages, wait_s=wait)

    def _unique_run(self, start: str) -> str:
        found = runs_starting_with(self.store.client, self.store.keys.runs, start, limit=6)
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

    @functools.cached_property
    def _dispatcher(self) -> Dispatcher:
        return Dispatcher(self.settings, self.app, self.store, self.broker, self._redactor, self._patience)

    def _sized(self, inputs: Iterable[Mapping[str, Any]], stagger_s: float) -> tuple[Iterable[Any], int]:
        """``inputs`` and how many there are, as far as the run's priority needs to know: a
        staggered run's are read in full (each start depends on the count); a stream's first
        ``dispatch.small_run_items`` + 1 are looked at, enough to tell a small run."""
        if stagger_s > 0 and not isinstance(inputs, Sized):
            inputs = list(inputs)
        if isinstance(inputs, Sized):
            return inputs, len(inputs)
        stream = iter(inputs)
        head = list(itertools.islice(stream, self.settings.dispatch.small_run_items + 1))
        return itertools.chain(head, stream), len(head)

    def _run(self, run_id: str, name: str, total: int) -> Run:
        store = self._patience.wrap(self.store)
        return Run(
            run_id, store=store, app=self.app, total=total, name=name, fanin=self.settings.queues.fanin
        )

    def _stagger(self, count: int, stagger_s: float) -> list[float] | None:
        """The starts of ``count`` messages spread over ``stagger_s`` seconds (None: no stagger)."""
        return stagger(count, stagger_s, self.settings.max_countdown_s) if stagger_s > 0 else None

    def _plan(
        self,
        kind: str,
        opts: RunOptions,
        size: int,
        *,
        label: str,
        extra: dict[str, Any] | None = None,
        fast: bool = False,
        **stages: Any,
    ) -> RunPlan:
        """The plan of a run of ``size`` items: what ``stages`` say of its tasks, what ``opts``
        say of the rest; its own dollar cap goes into the spend ledger before any item is sent."""
        if opts.batch_size is not None and kind != "map":
            raise DispatchError(f"batch_size packs the items of a map; a {kind}'s items are sent one by one")
        shared = {"tenant": opts.tenant} if opts.tenant is not None else {}
        plan = RunPlan(
            run_id=self._new_run_id(),
            label=opts.name or label,
            kind=kind,
            max_in_flight=opts.max_in_flight,
            aggregate=_callable_path(opts.aggregate) if opts.aggregate is not None else None,
            fail_fast=self.settings.fail_fast if opts.fail_fast is None else opts.fail_fast,
            priority=run_priority(opts.priority, size, self.settings),
            shared=shared,
            extra={**shared, **(extra or {})},
            fast=fast,
            **stages,
        )
        if opts.budget_usd is not None:
            ledger = SpendLedger.from_settings(self.settings, self.store.client)
            self._patience.call(ledger.set_budget, plan.run_id, opts.budget_usd)
        return plan

    @property
    def _patience(self) -> Patience:
        """How long the client's calls ride out a Redis outage (``delivery.client_outage_s``)."""
        return Patience(self.settings.delivery.client_outage_s, self.settings.broker_url)
