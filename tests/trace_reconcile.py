"""The reconciler's resend under tracing, run as its own process (tracing is decided once per
process): ``python trace_reconcile.py BROKER_URL TAG`` dispatches a run of two items to a
queue nobody reads, loses one message, lets the reconciler send it again, and prints the run
id and the queued messages' headers as one JSON object."""

from __future__ import annotations

import json
import sys
import time

import redis

from agentfleet import tracing
from agentfleet.config import load_settings
from agentfleet.orchestration import Fleet
from agentfleet.tasks.reconciler import Reconciler
from agentfleet.tasks.runtime import runtime


def main(broker_url: str, tag: str) -> None:
    settings = load_settings(
        broker_url=broker_url,
        key_prefix=f"tr{tag}",
        queues={"agents": f"tr{tag}.agents", "fanin": f"tr{tag}.fanin", "maintenance": f"tr{tag}.m"},
        delivery={"reconcile_grace_s": 5.0, "reconcile_interval_s": 1.0},
        dispatch={"require_workers": False},
    )
    client = redis.Redis.from_url(broker_url)
    with Fleet(settings) as fleet:
        run = fleet.map("t.echo", [{"n": 0}, {"n": 1}], name="traced-resend")
        client.rpop(settings.queues.agents)  # a worker took it and died
        reconciler = Reconciler(runtime(settings), fleet.app, node="trace-test")
        now = time.time()
        reconciler.pass_once(now=now)
        recovered = reconciler.pass_once(now=now + 6).recovered
        reconciler.release()
    headers = [json.loads(raw)["headers"] for raw in client.lrange(settings.queues.agents, 0, -1)]
    tracing.flush()
    print(json.dumps({"run": run.id, "recovered": recovered, "headers": headers}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
