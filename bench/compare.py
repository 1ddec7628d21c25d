"""This tree against a base commit: the hot path, in-flight, fan-out and dispatch benchmarks, alternating.

``python bench/compare.py --base eb59add`` checks the base commit out in a temporary git
worktree (removed at the end), then runs each benchmark ``--rounds`` times on each tree,
alternating (this tree first in odd rounds, the base first in even ones, so a machine that
slows down or speeds up during the session weighs on both), every run with this interpreter
and each tree's own ``agentfleet`` on ``PYTHONPATH``. Each run's full output is kept under
``--logs``; the end prints, per benchmark and figure, each tree's values round by round, their
medians and this tree's median over the base's.

The figures are the benchmarks' own ratios to the baseline each measures in the same run
(plain Celery, ``asyncio.gather``), so the load of a shared machine cancels within a run;
``hot_path``'s Redis commands per item does not depend on load at all.
``--bench NAME=ARGS`` replaces a benchmark's arguments (``--bench "hot_path=--rounds 3"``);
naming ``--bench`` at all runs only the benchmarks named.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
TREE = HERE.parent

#: Each benchmark's default arguments and the figures read from its output (name, pattern
#: whose first group is the number).
BENCHES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "hot_path": (
        "--rounds 3",
        [
            ("throughput / Celery's", r"items per second\s+\S+\s+\S+\s+([\d.]+)x"),
            ("worker CPU / Celery's", r"worker CPU per item \(ms\)\s+\S+\s+\S+\s+([\d.]+)x"),
            ("Redis CPU / Celery's", r"Redis CPU per item \(ms\)\s+\S+\s+\S+\s+([\d.]+)x"),
            ("Redis commands per item", r"Redis commands per item\s+([\d.]+)"),
            ("worker CPU ms per item", r"worker CPU per item \(ms\)\s+([\d.]+)"),
            ("Redis CPU ms per item", r"Redis CPU per item \(ms\)\s+([\d.]+)"),
        ],
    ),
    "in_flight": (
        "",
        [
            ("10,000 in flight: wall / ideal", r"wall clock [\d.]+ s = ([\d.]+)x the ideal"),
            ("2,000: agentfleet wall / ideal", r"agentfleet\s+[\d.]+ s =\s+([\d.]+)x"),
            ("2,000: Celery wall / ideal", r"plain Celery\s+[\d.]+ s =\s+([\d.]+)x"),
            ("10,000: workers' CPU s", r"CPU over the run: workers ([\d.]+) s"),
            ("10,000: Redis CPU s", r"CPU over the run: workers [\d.]+ s, Redis ([\d.]+) s"),
        ],
    ),
    "fanout": (
        "--rounds 2",
        [
            ("threads: agentfleet / Celery", r"agentfleet over plain Celery: threads ([\d.]+)x"),
            ("gevent: agentfleet / Celery", r"over plain Celery: threads [\d.]+x, gevent ([\d.]+)x"),
            ("threads: agentfleet / ideal", r"agentfleet, threads 2 x 50\s+[\d.]+\s+([\d.]+)x"),
            ("gevent: agentfleet / ideal", r"agentfleet, gevent 1 x 100\s+[\d.]+\s+([\d.]+)x"),
            ("fan-in p50 ms", r"p50 ([\d.]+) ms"),
        ],
    ),
    "dispatch": (
        "--million 200000",
        [
            ("Fleet.map / pipelined LPUSH", r"-> Fleet.map ([\d.]+)x"),
            ("Celery group / Fleet.map", r"LPUSH, ([\d.]+)x Fleet.map"),
            ("Fleet.map items/s", r"is sent\s+[\d.]+ s\s+([\d.]+) items/s"),
            ("JSON Lines items/s", r"^([\d,]+) items/s;"),
            ("JSON Lines peak MiB", r"peak memory grew ([\d.]+) MiB"),
        ],
    ),
}


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(TREE), *args], check=True, capture_output=True, text=True).stdout


@contextlib.contextmanager
def checked_out(revision: str) -> Iterator[tuple[str, Path]]:
    """``revision``'s commit and a temporary git worktree of it, removed at the end."""
    commit = _git("rev-parse", "--verify", f"{revision}^{{commit}}").strip()
    base = Path(tempfile.mkdtemp(prefix=f"compare-{commit[:7]}-"))
    _git("worktree", "add", "--detach", str(base), commit)
    try:
        yield commit, base
    finally:
        _git("worktree", "remove", "--force", str(base))


def this_commit() -> str:
    """The short commit this tree is at."""
    return _git("rev-parse", "--short", "HEAD").strip()


def _run(tree: Path, bench: str, args: str, log: Path) -> dict[str, float]:
    """One run of ``bench`` on ``tree``; its output goes to ``log``; the figures it printed."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, f"bench/{bench}.py", *shlex.split(args)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    log.write_text(f"$ {shlex.join(command)}\n{done.stdout}\n--- stderr ---\n{done.stderr}")
    found = {}
    for name, pattern in BENCHES[bench][1]:
        match = re.search(pattern, done.stdout, re.MULTILINE)
        if match:
            found[name] = float(match.group(1).replace(",", ""))
    state = "ok" if done.returncode == 0 else f"exit {done.returncode}"
    print(f"  {bench} on {tree.name}: {state} in {time.monotonic() - started:.0f} s ({log})", flush=True)
    return found


def _report(bench: str, runs: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n# {bench}: round by round, median, this tree / base")
    for name, _ in BENCHES[bench][1]:
        medians = {}
        for side, rows in runs.items():
            values = [row[name] for row in rows if name in row]
            medians[side] = statistics.median(values) if values else float("nan")
            shown = " ".join(f"{v:.3g}" for v in values) or "-"
            print(f"  {name:32s} {side:5s} {shown:28s} median {medians[side]:.3g}")
        ratio = medians["this"] / medians["base"] if medians["base"] else float("nan")
        print(f"  {'':32s} ratio {ratio:.3f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with (any git revision)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each benchmark on each tree")
    parser.add_argument("--bench", action="append", default=[], metavar="NAME=ARGS")
    parser.add_argument("--logs", type=Path, help="where each run's output goes (default: a temporary dir)")
    args = parser.parse_args()
    chosen = {name: BENCHES[name][0] for name in BENCHES}
    if args.bench:
        chosen = {}
        for spec in args.bench:
            name, _, extra = spec.partition("=")
            if name not in BENCHES:
                parser.error(f"no benchmark {name!r}: one of {', '.join(BENCHES)}")
            chosen[name] = extra if "=" in spec else BENCHES[name][0]
    logs = args.logs or Path(tempfile.mkdtemp(prefix="compare-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        bench: {"this": [], "base": []} for bench in chosen
    }
    with checked_out(args.base) as (commit, base):
        print(f"this tree {TREE} ({this_commit()}) against {commit[:7]} at {base}")
        for n in range(args.rounds):
            order = [("this", TREE), ("base", base)]
            if n % 2:
                order.reverse()
            print(f"round {n + 1} of {args.rounds}", flush=True)
            for bench, extra in chosen.items():
                for side, tree in order:
                    log = logs / f"{bench}-{side}-{n + 1}.txt"
                    results[bench][side].append(_run(tree, bench, extra, log))
    for bench, runs in results.items():
        _report(bench, runs)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}; logs in {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
