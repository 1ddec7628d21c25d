"""Collectors: small functions that each read one part of the fleet and return samples.

``/metrics`` renders every sample; ``/health`` reads the few it needs by name. A collector
takes a ``Sources`` (settings, the run store, the live workers' heartbeats) and returns a
list of ``Sample``. Every one reads state the workers keep fresh in Redis (nothing pings a
worker), so a scrape takes a few round trips. Adding one is writing the function and
listing it in ``DEFAULT_COLLECTORS``.

Besides queues, workers, completions and outcomes:

- dead-letter queue: ``agentfleet_dlq_depth{category}``; ``/health`` reports the sum as
  ``dlq_depth``; ``agentfleet_malformed_messages_total{outcome}``, the queue entries workers
  could not decode or deliver, kept as dead letters (``dead_lettered``) or ``dropped``;
- limiter, per known downstream: ``agentfleet_limiter_tokens{downstream,bucket}``,
  ``agentfleet_limiter_slots_in_use{downstream}``, ``agentfleet_limiter_slots_max{downstream}``,
  ``agentfleet_limiter_paused_seconds{downstream}``,
  ``agentfleet_limiter_leases_reclaimed_total{downstream}`` (leases that ran out while held);
- circuit breakers: ``agentfleet_circuit_open{downstream}`` (1 open or half-open, 0 closed);
  ``/health`` lists the open ones in ``open_circuits`` and says ``degraded`` while any is;
- queue age: ``agentfleet_queue_oldest_age_seconds{queue,role}`` (``queue_age``);
- spend: ``agentfleet_spend_today_usd{downstream}`` and, with ``budgets.run_usd`` set,
  ``agentfleet_run_budget_share{run,name}`` of each running run; the daily budgets:
  ``agentfleet_budget_spent_usd{scope,tenant}`` and ``agentfleet_budget_cap_usd`` for the
  fleet and each tenant today, ``agentfleet_budget_alerts_total{scope,level}``
  (``spend_collectors``);
- approvals: ``agentfleet_approvals_pending``, ``agentfleet_approvals_created_total`` and
  ``agentfleet_approval_decisions_total{decision}`` (``approval_collectors``).
"""

from __future__ import annotations

from agentfleet.dlq.store import DLQStore
from agentfleet.ratelimit import Limiter
from agentfleet.ratelimit.circuit import CircuitBreaker
from agentfleet.service.approval_collectors import collect_approvals
from agentfleet.service.queue_age import collect_queue_age
from agentfleet.service.samples import Collected, Collector, Sample, Sources, collect
from agentfleet.service.spend_collectors import collect_budget_share, collect_daily_budgets, collect_spend
from agentfleet.transport.layout import UNACKED, queue_keys

__all__ = [
    "COMPLETION_WINDOW_S",
    "DEFAULT_COLLECTORS",
    "Collected",
    "Collector",
    "Sample",
    "Sources",
    "collect",
    "collect_approvals",
    "collect_budget_share",
    "collect_circuits",
    "collect_completions",
    "collect_daily_budgets",
    "collect_dlq",
    "collect_limiter",
    "collect_malformed",
    "collect_outcomes",
    "collect_queue_age",
    "collect_queues",
    "collect_spend",
    "collect_workers",
]

# "Tasks completed in the last minute": the window of /health and /metrics, in seconds.
COMPLETION_WINDOW_S = 60


def collect_queues(sources: Sources) -> list[Sample]:
    """Waiting messages per queue, and messages delivered but not yet acknowledged."""
    queues = sources.settings.queues.model_dump()
    pipe = sources.broker.pipeline(transaction=False)
    for name in queues.values():
        for key in queue_keys(name):
            pipe.llen(key)
    pipe.hlen(UNACKED)
    replies = pipe.execute()
    samples = []
    per_queue = len(queue_keys(""))
    for i, (role, name) in enumerate(queues.items()):
        depth = sum(int(n) for n in replies[i * per_queue : (i + 1) * per_queue])
        samples.append(
            Sample(
                "agentfleet_queue_depth",
                depth,
                {"queue": name, "role": role},
                help=(
                    "Messages waiting in a broker queue, not yet taken by any worker. "
                    'Scale agent worker replicas on role="agents" (KEDA, an HPA).'
                ),
            )
        )
    samples.append(
        Sample(
            "agentfleet_unacked_messages",
            int(replies[-1]),
            help=(
                "Messages taken by workers and not acknowledged yet: running, prefetched, "
                "or waiting for a countdown (retries, deferrals)."
            ),
        )
    )
    return samples


def collect_workers(sources: Sources) -> list[Sample]:
    """Workers whose heartbeat is live, each with the seconds since its last one."""
    workers = sources.live_workers()
    samples = [
        Sample(
            "agentfleet_workers_active",
            len(workers),
            help="Workers whose heartbeat is live (one every worker.heartbeat_s seconds).",
        )
    ]
    up_help = "1 for each worker with a live heartbeat."
    samples += [Sample("agentfleet_worker_up", 1, {"worker": w.node}, help=up_help) for w in workers]
    return samples


def collect_completions(sources: Sources) -> list[Sample]:
    """Items completed in the last minute, and when the last one completed."""
    stats = sources.store.completion_stats(COMPLETION_WINDOW_S)
    samples = [
        Sample(
            "agentfleet_items_completed_last_minute",
            stats.completed_in_window,
            help="Items that reached a final outcome in the last 60 seconds.",
        )
    ]
    if stats.last_done_at is not None:
        samples.append(
            Sample(
                "agentfleet_last_completion_timestamp_seconds",
                stats.last_done_at,
                help="Unix time of the last item that reached a final outcome.",
            )
        )
    return samples


_OUTCOME_FIELDS = ("succeeded", "failed", "cancelled")


def collect_outcomes(sources: Sources) -> list[Sample]:
    """Counters since the first run: items by outcome, dead letters, cost, runs."""
    totals = sources.store.completion_stats(1).totals
    samples = [
        Sample(
            "agentfleet_items_total",
            totals.get(outcome, 0.0),
            {"outcome": outcome},
            kind="counter",
            help="Items that reached a final outcome, by outcome.",
        )
        for outcome in _OUTCOME_FIELDS
    ]
    samples += [
        Sample(
            "agentfleet_items_dead_lettered_total",
            totals.get("dead_lettered", 0.0),
            kind="counter",
            help="Items whose final failure went to the dead-letter queue.",
        ),
        Sample(
            "agentfleet_cost_usd_total",
            totals.get("cost_usd", 0.0),
            kind="counter",
            help="US dollars spent by finished items.",
        ),
        Sample(
            "agentfleet_worker_seconds_total",
            totals.get("worker_seconds", 0.0),
            kind="counter",
            help="Seconds finished items spent executing, summed over items.",
        ),
        Sample(
            "agentfleet_runs_started_total",
            totals.get("runs_started", 0.0),
            kind="counter",
            help="Runs (fan-outs and pipelines) dispatched.",
        ),
        Sample(
            "agentfleet_runs_finished_total",
            totals.get("runs_finished", 0.0),
            kind="counter",
            help="Runs whose every item reached a final outcome.",
        ),
    ]
    return samples


def collect_dlq(sources: Sources) -> list[Sample]:
    """Dead letters waiting for triage, by category (one zero sample when the queue is empty)."""
    settings = sources.settings
    stats = DLQStore.from_settings(settings, sources.store.client).stats(
        window_s=settings.dlq.vendor_issue_window_s, top=0
    )
    help_text = "Dead letters waiting for triage, by category."
    if not stats.by_category:
        return [Sample("agentfleet_dlq_depth", 0.0, {"category": "none"}, help=help_text)]
    return [
        Sample("agentfleet_dlq_depth", float(n), {"category": category}, help=help_text)
        for category, n in sorted(stats.by_category.items())
    ]


def collect_malformed(sources: Sources) -> list[Sample]:
    """Malformed queue entries workers took out: kept as dead letters, or dropped (counters)."""
    counts = DLQStore.from_settings(sources.settings, sources.store.client).malformed_counts()
    help_text = (
        "Queue entries workers could not decode or deliver as tasks and took out: kept as "
        "dead letters (category malformed), or dropped when none could be kept."
    )
    return [
        Sample(
            "agentfleet_malformed_messages_total",
            float(n),
            {"outcome": outcome},
            kind="counter",
            help=help_text,
        )
        for outcome, n in counts.items()
    ]


def collect_limiter(sources: Sources) -> list[Sample]:
    """Per downstream the limiter knows: tokens left per bucket, slots in use and cap, pause."""
    limiter = Limiter.from_settings(sources.settings, sources.store.client)
    samples: list[Sample] = []
    for downstream in limiter.known_downstreams():
        status = limiter.status(downstream)
        labels = {"downstream": downstream}
        for bucket in status.buckets:
            samples.append(
                Sample(
                    "agentfleet_limiter_tokens",
                    bucket.tokens,
                    {**labels, "bucket": bucket.name},
                    help="Tokens left in a downstream's bucket (requests or LLM tokens).",
                )
            )
        samples.append(
            Sample(
                "agentfleet_limiter_slots_in_use",
                float(status.slots_in_use),
                labels,
                help="Concurrency leases held on a downstream, cluster-wide.",
            )
        )
        if status.max_slots is not None:
            samples.append(
                Sample(
                    "agentfleet_limiter_slots_max",
                    float(status.max_slots),
                    labels,
                    help="A downstream's max_concurrency.",
                )
            )
        samples.append(
            Sample(
                "agentfleet_limiter_paused_seconds",
                status.paused_for_s,
                labels,
                help="Seconds a downstream stays paused after a 429 or 529.",
            )
        )
        if status.max_slots is not None:
            samples.append(
                Sample(
                    "agentfleet_limiter_leases_reclaimed_total",
                    float(status.leases_reclaimed),
                    labels,
                    kind="counter",
                    help="Concurrency leases that ran out while held and were taken back "
                    "(a dead holder, or a worker starved past limiter.lease_ttl_s).",
                )
            )
    return samples


def collect_circuits(sources: Sources) -> list[Sample]:
    """Each downstream with a circuit: 1 while open or half-open, 0 when closed."""
    breaker = CircuitBreaker.from_settings(sources.settings, sources.store.client)
    return [
        Sample(
            "agentfleet_circuit_open",
            0.0 if status.state == "closed" else 1.0,
            {"downstream": status.downstream, "state": status.state},
            help="1 while a downstream's circuit is open or half-open, else 0.",
        )
        for status in breaker.statuses()
    ]


DEFAULT_COLLECTORS: tuple[Collector, ...] = (
    collect_queues,
    collect_workers,
    collect_completions,
    collect_outcomes,
    collect_dlq,
    collect_malformed,
    collect_limiter,
    collect_circuits,
    collect_queue_age,
    collect_spend,
    collect_budget_share,
    collect_daily_budgets,
    collect_approvals,
)
