"""Run every benchmark in bench/, one after another (``make bench``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Not benchmarks (helpers, task modules), a 30-minute run of its own (``soak.py``), or the
# comparison with a base commit that needs one named (``compare.py``).
SKIP = {"run_all.py", "bench_tasks.py", "plain_app.py", "soak.py", "compare.py"}


def main() -> int:
    failures = 0
    for script in sorted(HERE.glob("*.py")):
        if script.name in SKIP or script.name.startswith("_"):
            continue
        print(f"\n=== {script.name} ===", flush=True)
        failures += subprocess.run([sys.executable, str(script)], check=False).returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
