"""The client side of the tracing test, run as its own process (tracing is decided once per
process): three runs, whose ids it prints as one JSON object.

``python trace_client.py SERVICE_URL``: a map of one agent (its model call answered 429 once,
so the item is retried), a two-stage pipeline calling ``SERVICE_URL``, and a map whose item is
dead-lettered, then requeued from the DLQ.
"""

from __future__ import annotations

import json
import sys
import time

import agent_test_tasks as at
import trace_test_tasks as tt

from agentfleet import Fleet


def main(service_url: str) -> None:
    fleet = Fleet()
    agent = fleet.map(at.lookup_agent, [{"prompt": 'CALL lookup {"q": "answer"}'}], name="traced-agent")
    assert agent.wait(timeout_s=90).succeeded == 1
    pipeline = fleet.pipeline([tt.call_service, tt.after_call], [{"url": service_url}], name="traced-pipe")
    assert pipeline.wait(timeout_s=90).succeeded == 1
    failing = fleet.map(tt.always_fails, [{"n": 1}], name="traced-requeue")
    assert failing.wait(timeout_s=90).dead_lettered == 1
    (entry,) = fleet.dlq.list(run_id=failing.id)
    fleet.dlq.requeue([entry.id])
    deadline = time.monotonic() + 90
    while not [e for e in fleet.dlq.list(run_id=failing.id) if e.requeues >= 1]:
        assert time.monotonic() < deadline, "the requeued item did not fail again"
        time.sleep(0.2)
    print(json.dumps({"agent": agent.id, "pipeline": pipeline.id, "requeue": failing.id}))


if __name__ == "__main__":
    main(sys.argv[1])
