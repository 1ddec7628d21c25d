"""How far a hard budget stop overshoots its cap: at most one call in flight per busy slot.

One worker process of 16 threads; runs of ``slots`` items (4, then 16: every item a busy slot)
each making model calls in a row (``LONG 150``: about 150 output tokens, ~$0.0008 a call at
Haiku's prices) against the mock Messages API at 0.5 s a call, under a run budget of
``--cap`` US dollars. Every call is gated on the run's spend before it is sent; calls already
on their way when the cap is crossed complete.

Printed per run: what the run spent over its cap, in US dollars and in calls (the mean cost of
a call answered in the same run is the unit), and that overshoot over its bound (one call per
busy slot): the target is at most 1.00.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from durable_support import FAR_HOST, durable_cluster  # noqa: E402
from http_scripted import ScriptedServer  # noqa: E402

from agentfleet.config import get_settings  # noqa: E402
from agentfleet.embedded_redis import EmbeddedRedis  # noqa: E402
from agentfleet.mock_llm import MockMessagesServer  # noqa: E402
from agentfleet.spend import SpendLedger  # noqa: E402

MODEL = "claude-haiku-4-5"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=float, default=0.02, help="the run budget, US dollars")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    price = get_settings().llm.prices[MODEL]
    print(f"# run budget ${args.cap}; 0.5 s a call; bound: one call per busy slot")
    print(f"{'busy slots':>10s} {'spent $':>9s} {'over $':>9s} {'over, calls':>12s} {'of bound':>9s}")
    with (
        EmbeddedRedis() as redis_server,
        MockMessagesServer(latency=0.5) as mock,
        ScriptedServer(host=FAR_HOST) as far,
    ):
        os.environ["AGENTFLEET_BROKER_URL"] = redis_server.url
        with durable_cluster(redis_server.url, mock, far, concurrency=16) as cluster:
            fleet = cluster.fleet()
            for slots in (4, 16):
                for round_no in range(args.rounds):
                    marker = f"overshoot-{slots}-{round_no}"
                    inputs = [{"prompt": f"{marker}\nLONG 150", "calls": 200}] * slots
                    run = fleet.map("durable_test_tasks.talker", inputs, budget_usd=args.cap)
                    run.wait(timeout_s=300)
                    costs = [
                        (r.input_tokens * price.input_per_mtok + r.output_tokens * price.output_per_mtok)
                        / 1e6
                        for r in mock.requests
                        if r.status == 200 and marker in (r.prompt or "")
                    ]
                    spent = SpendLedger.from_settings(fleet.settings, fleet.store.client).standing(run.id)[0]
                    over = spent - args.cap
                    calls = over / statistics.mean(costs)
                    print(f"{slots:10d} {spent:9.5f} {over:9.5f} {calls:12.2f} {calls / slots:9.2f}")


if __name__ == "__main__":
    main()
