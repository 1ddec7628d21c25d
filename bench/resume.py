"""Resuming agents after a SIGKILL: repeated model calls and tool effects per item.

``--items`` agents (default 8) each walk a chain of 6 tools (``CHAIN tool_a, ...``: 7 model
calls, 6 tool calls) on one worker process of 8 threads, against the mock Messages API (0.3 s
per call) and a far end that takes 0.5 s per tool effect. Once half of all the tool effects
have arrived, the worker is SIGKILLed and a fresh one started; the items come back through
their lapsed claims and the reconciler (fast settings: claim 4 s, pass 1 s, grace 2 s).

Counted at the far ends, per item:

- repeated model calls: calls the mock answered beyond the 7 an uninterrupted agent makes;
- tool calls made again: requests to the far end beyond the 6 an uninterrupted agent makes
  (with checkpoints, only a tool cut off by the kill runs again);
- effects applied twice: distinct ``Idempotency-Key`` values beyond the 6, i.e. what an API
  honouring the key would still apply twice. (The mock gives the same reply, ``tool_use`` ids
  included, to the same conversation, so an agent starting over reuses its keys here; a real
  model's would not, and there every call made again would be an effect applied twice.)

The baseline is the same run with ``agent.checkpoint = false`` (the agent starts over), in the
same invocation; the figures are printed side by side with their ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from durable_support import FAR_HOST, durable_cluster  # noqa: E402
from http_scripted import Reply, ScriptedServer  # noqa: E402

from agentfleet.mock_llm import MockMessagesServer  # noqa: E402

TOOLS = ["tool_a", "tool_b", "tool_c", "tool_d", "tool_a", "tool_b"]
TURNS = len(TOOLS) + 1


def one_side(redis_url: str, items: int, checkpoint: bool) -> dict[str, float]:
    with MockMessagesServer(latency=0.3) as mock, ScriptedServer(host=FAR_HOST) as far:
        far.script("/effect", Reply(200, {"applied": True}, delay_s=0.5))
        with durable_cluster(
            redis_url, mock, far, concurrency=8, AGENTFLEET_AGENT__CHECKPOINT=str(checkpoint).lower()
        ) as cluster:
            prompts = [f"resume-bench {n}\nCHAIN {', '.join(TOOLS)}" for n in range(items)]
            run = cluster.fleet().map("durable_test_tasks.chain_agent", [{"prompt": p} for p in prompts])
            while len(far.hits("/effect")) < items * len(TOOLS) // 2:
                time.sleep(0.05)
            cluster.kill_worker(cluster.workers[0])
            killed_at = time.monotonic()
            cluster.add_worker()
            summary = run.wait(timeout_s=600)
            recovered_s = time.monotonic() - killed_at
        answered = Counter(
            (r.prompt or "").split("\n")[0]
            for r in mock.requests
            if r.path == "/v1/messages" and r.status == 200
        )
        keys = Counter(h.headers.get("idempotency-key", "") for h in far.hits("/effect"))
    per_item_keys = Counter(key.split(":")[1] for key in keys)
    return {
        "ok": summary.succeeded,
        "model": sum(n - TURNS for n in answered.values()) / items,
        "effects": sum(n - len(TOOLS) for n in per_item_keys.values()) / items,
        "calls": (sum(keys.values()) - items * len(TOOLS)) / items,
        "seconds": recovered_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=8)
    args = parser.parse_args()
    from agentfleet.embedded_redis import EmbeddedRedis

    with EmbeddedRedis() as redis_server:
        os.environ["AGENTFLEET_BROKER_URL"] = redis_server.url
        resumed = one_side(redis_server.url, args.items, checkpoint=True)
        restarted = one_side(redis_server.url, args.items, checkpoint=False)
    print(
        f"# {args.items} agents of {TURNS} model calls and {len(TOOLS)} tool calls; a worker killed half-way"
    )
    print(f"{'per item':40s} {'checkpoints':>12s} {'start over':>12s}")
    for key, label in (
        ("model", "repeated model calls"),
        ("calls", "tool calls made again"),
        ("effects", "effects applied twice (distinct keys)"),
    ):
        print(f"{label:40s} {resumed[key]:12.2f} {restarted[key]:12.2f}")
    ratio = resumed["model"] / restarted["model"] if restarted["model"] else 0.0
    print(f"repeated model calls: {ratio:.2f}x those of starting over (target: at most 1 per item)")
    seconds = f"{resumed['seconds']:.1f} s / {restarted['seconds']:.1f} s"
    print(
        f"items ok: {resumed['ok']:.0f} / {restarted['ok']:.0f}; from the kill to the last outcome {seconds}"
    )


if __name__ == "__main__":
    main()
