"""Sandbox start: cold and warm ``ctx.sandbox.run(["true"])`` against a plain ``subprocess.run``,
and 100 concurrent sandboxes on one worker (their memory, and the spread of their starts).

A cold start makes the item's sandbox (its workspace from the template, a host user of its
own) and runs ``true`` in it; a warm start takes a sandbox the warm pool made in advance and
runs ``true``. What follows the item (destroying the cold sandbox, resetting the warm one into
the pool) is off the start's path and timed apart. Each is measured interleaved with
``subprocess.run(["true"])``, so the ratios see the same machine load. The template is a
directory of ``--files`` small files (a checkout's worth of copying).

    .venv/bin/python bench/sandbox_start.py [--rounds 30] [--files 200] [--concurrent 100]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from agentfleet.config import load_settings
from agentfleet.sandbox.backend import SandboxHandle
from agentfleet.sandbox.pool import SandboxPool
from agentfleet.sandbox.spec import SandboxSpec, resolve_spec
from agentfleet.sandbox.uids import UID_BASE, UID_COUNT


def _template(files: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix="af-bench-template-"))
    root.chmod(0o755)
    for i in range(files):
        (root / f"f{i:04d}.py").write_text("x = 1\n" * 20)
    return root


def _once(pool: SandboxPool, spec: SandboxSpec) -> tuple[float, float]:
    """Seconds to the end of ``run(["true"])`` from asking for the sandbox, and of its release."""
    started = time.perf_counter()
    lease = pool.acquire(spec)
    result = SandboxHandle(lease.sandbox).run(["true"])
    ran = time.perf_counter()
    assert result.exit_code == 0, result
    lease.release()
    return ran - started, time.perf_counter() - ran


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"median {statistics.median(values) * 1e3:7.1f} ms  p90 {p90 * 1e3:7.1f} ms"


def starts(rounds: int, template: Path) -> None:
    cold = SandboxPool(load_settings(sandbox={"template": str(template), "warm": 0}))
    warm = SandboxPool(load_settings(sandbox={"template": str(template), "warm": 1}))
    none = SandboxPool(load_settings(sandbox={"template": str(template), "warm": 1, "backend": "none"}))
    try:
        warm.fill()
        none.fill()
        times: dict[str, list[float]] = {"plain": [], "cold": [], "warm": [], "none (warm)": []}
        after: dict[str, list[float]] = {"cold": [], "warm": [], "none (warm)": []}
        pools = {"cold": cold, "warm": warm, "none (warm)": none}
        for _ in range(rounds):
            times["plain"].append(_timed(lambda: subprocess.run(["true"], check=True)))
            for label, pool in pools.items():
                start_s, release_s = _once(pool, resolve_spec(SandboxSpec(), pool.settings.sandbox))
                times[label].append(start_s)
                after[label].append(release_s)
                while pool.settings.sandbox.warm and pool.warm_count() < 1:
                    time.sleep(0.001)
        base = statistics.median(times["plain"])
        files = len(os.listdir(template))
        print(f"start to the end of run(['true']), {rounds} rounds, template of {files} files:")
        for label, values in times.items():
            ratio = statistics.median(values) / base
            print(f"  {label:<12} {_ms(values)}  x{ratio:6.1f} plain subprocess.run")
        print("after the item (destroyed when cold, reset into the pool when warm):")
        for label, values in after.items():
            print(f"  {label:<12} {_ms(values)}")
    finally:
        for pool in (cold, warm, none):
            pool.close()


def _sandbox_rss_kib() -> tuple[int, int]:
    """(processes, KiB resident) of every process of a sandbox user."""
    count = rss = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if UID_BASE <= int(fields["Uid"].split()[0]) < UID_BASE + UID_COUNT and "VmRSS" in fields:
            count += 1
            rss += int(fields["VmRSS"].split()[0])
    return count, rss


def _available_kib() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1])
    return 0


def concurrent(n: int) -> None:
    pool = SandboxPool(load_settings(sandbox={"warm": 0}))
    spec = resolve_spec(SandboxSpec(), pool.settings.sandbox)
    leases = [pool.acquire(spec) for _ in range(n)]
    gate = threading.Event()
    began: list[float] = [0.0] * n
    errors: list[str] = []

    def one(i: int) -> None:
        gate.wait()
        result = SandboxHandle(leases[i].sandbox).run(["sh", "-c", "date +%s.%N; sleep 4"])
        if result.exit_code != 0:
            errors.append(result.stderr)
            return
        began[i] = float(result.stdout.strip())

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    before = _available_kib()
    opened = time.time()
    gate.set()
    time.sleep(3.0)
    processes, rss = _sandbox_rss_kib()
    used = before - _available_kib()
    for thread in threads:
        thread.join()
    for lease in leases:
        lease.release()
    pool.close()
    delays = sorted(b - opened for b in began if b)
    print(f"{n} concurrent sandboxes on one worker ({len(delays)} started, {len(errors)} failed):")
    print(f"  processes of the sandboxes' users: {processes}, resident {rss / 1024:.1f} MiB in all")
    print(f"  host memory taken while they ran: {used / 1024:.1f} MiB ({used / 1024 / n:.2f} MiB each)")
    if delays:
        p = [delays[min(len(delays) - 1, int(len(delays) * q))] for q in (0.0, 0.5, 0.9)]
        print(
            f"  program started after the gate opened: first {p[0] * 1e3:.0f} ms, "
            f"median {p[1] * 1e3:.0f} ms, "
            f"p90 {p[2] * 1e3:.0f} ms, last {delays[-1] * 1e3:.0f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=100)
    args = parser.parse_args()
    template = _template(args.files)
    try:
        starts(args.rounds, template)
        concurrent(args.concurrent)
    finally:
        shutil.rmtree(template)


if __name__ == "__main__":
    main()
