"""How many agentfleet modules one item passes through, from ``Fleet.map`` to ``Run.wait``.

One embedded Redis and one real worker (a prefork pool of one process, the default pool).
Every process (this client, the worker's main process, its pool child) records the agentfleet
modules whose Python functions run on its main thread (``bench/_module_trace.py``, loaded by a
``sitecustomize`` written to a temporary directory). After a warm-up run, two windows:

- ``item``: ``Fleet.map`` of one no-op ``agentfleet.simulated_agent`` item, then ``Run.wait``;
- ``idle``: nothing sent, for as long as the item's window lasted: what runs on its own
  (polling, heartbeats), which the item's window also holds.

Prints the count of each process's modules and of their union, for each window, and with
``--list`` the modules themselves. A count of modules, not of time: run it before and after
a change to the delivery to see how many modules a reader follows for one item.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
_SITECUSTOMIZE = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
import _module_trace
_module_trace.start()
"""


def _window(trace: Path, name: str, pids: int, action: object) -> tuple[float, dict[int, set[str]]]:
    (trace / f"open-{name}").touch()
    time.sleep(0.3)
    began = time.perf_counter()
    if callable(action):
        action()
    elapsed = time.perf_counter() - began
    time.sleep(0.3)
    (trace / f"close-{name}").touch()
    deadline = time.monotonic() + 30
    while len(list(trace.glob(f"seen-{name}-*.txt"))) < pids and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = {
        int(path.stem.rsplit("-", 1)[1]): set(filter(None, path.read_text().splitlines()))
        for path in trace.glob(f"seen-{name}-*.txt")
    }
    return elapsed, seen


def _report(name: str, elapsed: float, seen: dict[int, set[str]], client: int, show: bool) -> set[str]:
    union = set().union(*seen.values())
    parts = ", ".join(
        f"{'client' if pid == client else f'worker pid {pid}'} {len(modules)}"
        for pid, modules in sorted(seen.items(), key=lambda item: item[0] != client)
    )
    print(f"{name:5} window {elapsed:5.2f} s: {len(union)} modules ({parts})")
    if show:
        for module in sorted(union):
            where = {"client" if pid == client else "worker" for pid, mods in seen.items() if module in mods}
            print(f"    {module}  [{', '.join(sorted(where))}]")
    return union


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the modules of each window")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="item-modules-") as scratch:
        site, trace = Path(scratch, "site"), Path(scratch, "trace")
        site.mkdir()
        trace.mkdir()
        (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        os.environ["AGENTFLEET_MODULE_TRACE"] = str(trace)
        sys.path.insert(0, str(HERE))
        import _module_trace

        _module_trace.start()
        from agentfleet.local import LocalCluster
        from agentfleet.tasks.builtin import simulated_agent

        with LocalCluster(workers=1, concurrency=1, pool="prefork") as cluster:
            fleet = cluster.fleet()
            fleet.map(simulated_agent, [{"latency_s": 0.0} for _ in range(3)]).wait(timeout_s=60)

            def one_item() -> None:
                summary = fleet.map(simulated_agent, [{"latency_s": 0.0}]).wait(timeout_s=60)
                assert summary.succeeded == 1, summary

            client = os.getpid()
            elapsed, seen = _window(trace, "item", 3, one_item)
            item = _report("item", elapsed, seen, client, args.list)
            idle_s, idle_seen = _window(trace, "idle", 3, lambda: time.sleep(elapsed))
            idle = _report("idle", idle_s, idle_seen, client, args.list)
            print(f"modules that ran in the item's window and not in the idle one: {len(item - idle)}")


if __name__ == "__main__":
    main()
