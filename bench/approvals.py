"""Parked items hold no slot: throughput beside them, Redis memory per parked item, and the
time from a decision to the body resuming.

One worker process of 8 threads (fast reconciler settings). In one invocation:

1. baseline: a run of ``--work`` items that each hold their slot 20 ms, nothing parked;
2. ``--parked`` items (default 10,000) reach ``ctx.approval`` and park; Redis ``used_memory``
   (``INFO memory``) before their dispatch and once all are parked gives the memory per parked
   item (everything the item costs while parked: its run's per-item records and its pause);
3. the same run of ``--work`` items again, beside the parked ones: its throughput as a ratio
   to the baseline (1.0: parked items cost the worker nothing);
4. ``--decide`` of the parked items approved one at a time, 50 ms apart: for each, seconds from
   just before ``Fleet.approve`` to the resumed body's first line after the call (p50, p99);
5. the parked run cancelled (its items end cancelled), and the baseline run again: the ratio
   is printed against both baselines, so a machine whose load drifts shows it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))

from fault_support import FAST_DELIVERY, delivery_env  # noqa: E402

from agentfleet import LocalCluster  # noqa: E402
from agentfleet.config import load_settings  # noqa: E402
from agentfleet.orchestration import Fleet  # noqa: E402


def throughput(fleet: Fleet, items: int) -> float:
    """Items per second of a run of ``items`` 20 ms items, dispatch to last outcome."""
    start = time.monotonic()
    run = fleet.map("approval_test_tasks.work", [{"n": n} for n in range(items)])
    summary = run.wait(timeout_s=600)
    assert summary.succeeded == items, summary
    return items / (time.monotonic() - start)


def _rss_mb(pids: list[int]) -> float:
    """Resident set size of processes ``pids``, in MB (Linux /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()
            total += int(fields[0])
        except (OSError, IndexError):
            continue
    return total / 1024


def measured(fleet: Fleet, items: int, pids: list[int], label: str, diagnose: bool) -> float:
    """``throughput``; with ``diagnose``, the Redis commands it cost (calls and usec per item,
    ``INFO commandstats`` before and after), the slowlog, the keyspace and the workers' RSS."""
    client = fleet.approval_store.client
    if not diagnose:
        return throughput(fleet, items)
    client.config_resetstat()
    client.slowlog_reset()
    rate = throughput(fleet, items)
    stats = client.info("commandstats")
    top = sorted(stats.items(), key=lambda kv: -kv[1]["usec"])[:8]
    load, rss = os.getloadavg()[0], _rss_mb(pids)
    print(f"  [{label}] keys {client.dbsize()}, worker RSS {rss:.0f} MB, load {load:.1f}; commands by usec:")
    for name, s in top:
        command = name.removeprefix("cmdstat_")
        per_item = s["usec"] / items
        print(f"    {command:<14} calls {s['calls']:>7} usec {s['usec']:>9} per item {per_item:8.1f} us")
    for entry in client.slowlog_get(5):
        print(f"    slow: {entry['duration']} us {entry['command'][:120]!r}")
    return rate


def wait_parked(fleet: Fleet, run_id: str, n: int) -> None:
    while fleet.approval_store.client.scard(fleet.approval_store.keys.run(run_id)) < n:
        time.sleep(0.5)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench(redis_url: str, parked: int, work: int, decide: int, diagnose: bool = False) -> None:
    tag = uuid.uuid4().hex[:8]
    queues = {"agents": f"b{tag}.agents", "fanin": f"b{tag}.fanin", "maintenance": f"b{tag}.maint"}
    env = {
        "AGENTFLEET_TASK_MODULES": "approval_test_tasks",
        "PYTHONPATH": str(TESTS),
        **delivery_env(FAST_DELIVERY),
    }
    settings = load_settings(queues=queues, key_prefix=f"b{tag}", delivery=FAST_DELIVERY)
    with LocalCluster(
        workers=1, concurrency=8, pool="threads", broker_url=redis_url, env=env, settings=settings
    ) as cluster:
        fleet = cluster.fleet()
        client = fleet.approval_store.client
        throughput(fleet, 50)  # warm up
        pids = [w.pid for w in cluster.workers]
        base = measured(fleet, work, pids, "nothing parked", diagnose)
        print(
            f"throughput, nothing parked:     {base:8.1f} items/s ({work} items of 20 ms, 8 slots)",
            flush=True,
        )
        before = int(client.info("memory")["used_memory"])
        started = time.monotonic()
        run = fleet.map("approval_test_tasks.stamped", [{"token": str(n)} for n in range(parked)])
        wait_parked(fleet, run.id, parked)
        park_s = time.monotonic() - started
        time.sleep(2)  # the last acknowledgements and the reconciler's passes settle
        after = int(client.info("memory")["used_memory"])
        sample = fleet.approvals(run=run.id)[0]
        record = int(client.memory_usage(fleet.approval_store.keys.record(sample.id)) or 0)
        print(f"parked items: {parked} (parked in {park_s:.1f} s, {parked / park_s:.0f}/s)", flush=True)
        if diagnose:
            print(f"  worker RSS with them parked: {_rss_mb(pids):.0f} MB", flush=True)
        per_item = (after - before) / parked
        print(f"redis memory per parked item:   {per_item:8.0f} bytes (its pause's record: {record} bytes)")
        beside = measured(fleet, work, pids, f"{parked} parked", diagnose)
        print(f"throughput, {parked} parked: {beside:8.1f} items/s   ratio {beside / base:.3f}", flush=True)
        pending = {a.task_id.rsplit("-", 1)[1]: a.id for a in fleet.approvals(run=run.id)}
        latencies = []
        for token in list(pending)[:decide]:
            t0 = time.time()
            fleet.approve(pending[token], by="bench")
            while (stamp := client.hget("test:appr:resumed", token)) is None:
                time.sleep(0.002)
            latencies.append(float(stamp) - t0)
            time.sleep(0.05)
        run.cancel(compensate=False)
        ended = run.wait(timeout_s=1800)
        after_base = measured(fleet, work, pids, "cancelled", diagnose)
        print(
            f"throughput, nothing parked again: {after_base:8.1f} items/s ({ended.cancelled} cancelled); "
            f"ratio to it {beside / after_base:.3f}, to both {2 * beside / (base + after_base):.3f}"
        )
    print(
        f"decision to resume ({len(latencies)} decisions): p50 {statistics.median(latencies) * 1000:.1f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parked", type=int, default=10_000, help="items parked (default 10,000)")
    parser.add_argument("--work", type=int, default=1000, help="items of the run measured beside them")
    parser.add_argument("--decide", type=int, default=200, help="decisions timed")
    parser.add_argument("--diagnose", action="store_true", help="Redis commands, slowlog and RSS per run")
    parser.add_argument("--small", action="store_true", help="500 parked, 400 items, 50 decisions")
    args = parser.parse_args()
    if args.small:
        args.parked, args.work, args.decide = 500, 400, 50
    from agentfleet.embedded_redis import EmbeddedRedis

    url = os.environ.get("AGENTFLEET_BROKER_URL")
    if url:
        bench(url, args.parked, args.work, args.decide, args.diagnose)
        return
    with EmbeddedRedis() as server:
        bench(server.url, args.parked, args.work, args.decide, args.diagnose)


if __name__ == "__main__":
    main()
