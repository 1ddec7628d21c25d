"""Redis's instructions per item on the hot path, counted by callgrind: a figure load does not move.

CPU seconds on a shared machine move by 10-20 % from run to run, more than the few per cent a
change to a Lua script makes. Instructions do not: ``redis-server`` runs under valgrind's
callgrind, counting only while the measured run goes (``callgrind_control -i on`` / ``off``),
and two runs of one tree agree within about half a per cent. The work is the fleet side of
``bench/hot_path.py``: one agentfleet worker of 8 threads, ``Fleet.map`` of ``--tasks`` no-op
``agentfleet.simulated_agent`` items after a warm-up of 100, then ``Run.wait``. Everything Redis
does for them counts: commands, the Lua scripts, reading requests and writing replies; its idle
timer too, a few hundred instructions per item.

With ``--base REV`` it measures the base commit as well (checked out in a temporary git
worktree, removed at the end: this file runs there with the base's ``agentfleet`` on
``PYTHONPATH``) and prints this tree's count over the base's. Needs ``valgrind``
(``apt-get install valgrind``); Redis runs about 50 times slower under it, so a run of 2,000
items takes about a minute.

    .venv/bin/python bench/instructions.py [--tasks 2000] [--base eb59add]

Worker CPU is not counted here: a worker's threads and idle loop make its instruction count
move with scheduling (a few per cent between runs), so ``bench/hot_path.py``'s ratios stay the
figure for it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compare import checked_out, this_commit

HERE = Path(__file__).resolve()
TREE = HERE.parent.parent
_TASK = "agentfleet.simulated_agent"


def _items(n: int) -> list[dict[str, object]]:
    return [{"item": i, "latency_s": 0.0} for i in range(n)]


def _instrument(pid: int, state: str) -> None:
    """Turn callgrind's counting in process ``pid`` on or off."""
    subprocess.run(["callgrind_control", "-i", state, str(pid)], check=True, capture_output=True)


def _count(tasks: int) -> float:
    """Redis's instructions per item of one measured run (this process's ``agentfleet``)."""
    import redis

    from agentfleet.config import load_settings
    from agentfleet.embedded_redis import free_port, redis_server_binary
    from agentfleet.local import LocalCluster

    work = Path(tempfile.mkdtemp(prefix="instructions-"))
    out, port = work / "callgrind.out", free_port()
    server = subprocess.Popen(
        [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
            redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(work),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("redis-server under valgrind did not start") from None
                time.sleep(0.2)
        settings = load_settings(broker_url=url)
        with LocalCluster(
            workers=1, concurrency=8, pool="threads", broker_url=url, settings=settings, loglevel="WARNING"
        ) as cluster:
            fleet = cluster.fleet()
            fleet.map(_TASK, _items(100)).wait(timeout_s=600)
            time.sleep(1.0)
            _instrument(server.pid, "on")
            done = fleet.map(_TASK, _items(tasks)).wait(timeout_s=3600)
            _instrument(server.pid, "off")
            if done.succeeded != tasks:
                raise RuntimeError(f"{done.succeeded} of {tasks} items succeeded")
    finally:
        with contextlib.suppress(redis.RedisError):
            client.shutdown(nosave=True)
        client.close()
        try:
            server.wait(timeout=300)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    totals = re.search(r"^totals:\s+(\d+)", out.read_text(), re.MULTILINE)
    shutil.rmtree(work, ignore_errors=True)
    if totals is None:
        raise RuntimeError("callgrind wrote no totals")
    return int(totals.group(1)) / tasks


def _measure(tree: Path, tasks: int) -> float:
    """This file run as a child with ``tree``'s ``agentfleet``: its count per item."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(HERE), "--child", "--tasks", str(tasks)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    found = re.search(r"^instructions per item ([\d.]+)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"the run on {tree} failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    return float(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--base", help="a commit to compare with (any git revision)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(f"instructions per item {_count(args.tasks):.0f}")
        return 0
    missing = [tool for tool in ("valgrind", "callgrind_control") if shutil.which(tool) is None]
    if missing:
        parser.error(f"needs {' and '.join(missing)} (apt-get install valgrind)")
    print(f"# Redis instructions per item, {args.tasks} no-op items, 1 worker of 8 threads")
    this = _measure(TREE, args.tasks)
    print(f"this tree ({this_commit()}) {this:12.0f}")
    if args.base:
        with checked_out(args.base) as (commit, base):
            counted = _measure(base, args.tasks)
        print(f"base {commit[:7]}      {counted:12.0f}")
        print(f"this tree / base   {this / counted:12.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
