"""Where Redis spends its time on the hot path: each command and Lua script, per item.

One embedded Redis, one agentfleet worker of 8 threads, the fleet side of ``bench/hot_path.py``
(``Fleet.map`` of no-op ``agentfleet.simulated_agent`` items, then ``Run.wait``). After two
warm-up runs, one run of ``--tasks`` items is measured with Redis's slowlog at 0 us, so every
command is logged with its own duration (a script's includes the commands it runs; those are
logged too, so the rows overlap). Prints per command or script (named by its file): calls per
item, median microseconds per call, microseconds per item and its share of all scripts' time;
then Redis's CPU, round trips and bytes per item from ``INFO``.

A diagnostic with no target: run it on two trees to see which script an item's extra Redis
time went to, from each tree's own directory (``cd <tree> && PYTHONPATH=<tree> python
<this file>``: the workers put the current directory first on their path). An older tree's
scripts are named too, wherever its modules kept them. Its durations are Redis's own clock,
so a busy machine moves them less than the wall-clock benchmarks.

    .venv/bin/python bench/script_costs.py [--tasks 300]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import statistics
from typing import Any

import redis

from agentfleet.config import load_settings
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.local import LocalCluster
from agentfleet.lua import ScriptSet
from agentfleet.orchestration import Fleet

#: Modules that hold script sets, on this tree or an older one (``PYTHONPATH=<tree>``).
_SCRIPT_MODULES = (
    "agentfleet.approvals.store", "agentfleet.dlq.store", "agentfleet.ratelimit.circuit",
    "agentfleet.ratelimit.scripts", "agentfleet.runs.budgets", "agentfleet.runs.delivery",
    "agentfleet.runs.store_base", "agentfleet.runs.store", "agentfleet.transport.intake",
    "agentfleet.redis_intake",
)  # fmt: skip


def _script_names() -> dict[str, str]:
    """Each script agentfleet sends, by the sha1 Redis knows it by."""
    import importlib
    from importlib import resources

    sets: list[ScriptSet] = []
    for module_name in _SCRIPT_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a tree without this module
            continue
        sets += [v for v in vars(module).values() if isinstance(v, ScriptSet) and v not in sets]
    names = {}
    for scripts in sets:
        folder = resources.files(scripts.package).joinpath(scripts.folder)
        for entry in folder.iterdir():
            name = entry.name.removesuffix(".lua")
            if entry.name.endswith(".lua") and name not in scripts.libraries:
                sha = hashlib.sha1(scripts.source(name).encode()).hexdigest()
                names[sha] = f"{scripts.folder}/{name}.lua"
    return names


def _info(client: redis.Redis) -> dict[str, float]:
    stats, cpu = client.info("stats"), client.info("cpu")
    return {
        "Redis CPU (us)": 1e6 * (cpu["used_cpu_sys"] + cpu["used_cpu_user"]),
        "bytes in": stats["total_net_input_bytes"],
        "bytes out": stats["total_net_output_bytes"],
        "commands (scripts' included)": stats["total_commands_processed"],
    }


def _run(fleet: Fleet, tasks: int) -> None:
    run = fleet.map("agentfleet.simulated_agent", [{"item": i, "latency_s": 0.0} for i in range(tasks)])
    assert run.wait(timeout_s=600).succeeded == tasks


def measure(tasks: int) -> tuple[dict[str, list[int]], dict[str, float]]:
    """Durations (us) per command or script name, and ``INFO`` figures per item."""
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        settings = load_settings(broker_url=server.url)
        options: dict[str, Any] = {"workers": 1, "concurrency": 8, "pool": "threads", "loglevel": "WARNING"}
        with LocalCluster(broker_url=server.url, settings=settings, **options) as cluster:
            fleet = cluster.fleet()
            for _ in range(2):
                _run(fleet, tasks)
            client.config_set("slowlog-max-len", 200 * tasks)
            client.config_set("slowlog-log-slower-than", 0)
            client.slowlog_reset()
            before = _info(client)
            _run(fleet, tasks)
            after = _info(client)
            log: list[dict[str, Any]] = client.slowlog_get(200 * tasks)
            client.config_set("slowlog-log-slower-than", 10_000)
    names = _script_names()
    durations: dict[str, list[int]] = collections.defaultdict(list)
    for entry in log:
        words = entry["command"].split()
        name = words[0].decode().upper()
        if name == "EVALSHA" and len(words) > 1:
            name = names.get(words[1].decode(), f"script {words[1].decode()[:8]}")
        durations[name].append(int(entry["duration"]))
    return durations, {key: (after[key] - before[key]) / tasks for key in before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    args = parser.parse_args()
    durations, info = measure(args.tasks)
    scripted = [d for name, d in durations.items() if name.endswith(".lua") or name.startswith("script ")]
    scripts = sum(sum(d) for d in scripted)
    print(f"# {args.tasks} no-op items, 1 worker of 8 threads; slowlog at 0 us (rows overlap: see above)")
    print(f"{'command or script':44s}{'calls/item':>11s}{'us/call':>9s}{'us/item':>9s}{'of scripts':>12s}")
    for name, spent in sorted(durations.items(), key=lambda pair: -sum(pair[1]))[:20]:
        share = f"{sum(spent) / scripts:11.2f}x" if scripts and name.endswith(".lua") else ""
        row = f"{len(spent) / args.tasks:11.2f}{statistics.median(spent):9.1f}{sum(spent) / args.tasks:9.1f}"
        print(f"{name:44s}{row}{share}")
    print()
    for key, value in info.items():
        print(f"{key + ' per item':44s}{value:11.1f}")


if __name__ == "__main__":
    main()
