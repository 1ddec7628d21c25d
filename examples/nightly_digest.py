"""A nightly schedule that fans out and posts a digest.

    python examples/nightly_digest.py

``nightly_digest.toml`` declares ``[schedules.nightly-competitors]``: at 02:00 UTC beat sends
``agentfleet.maintenance.run_schedule``, a maintenance worker starts the fan-out (one
``check_competitor`` agent per line of ``nightly_competitors.jsonl``) and, once every item
has an outcome, the aggregate ``post_digest`` posts one Slack-style digest to
``DIGEST_WEBHOOK_URL``.

To show it now rather than at 02:00, this script sends the very message beat would send for
that entry, to a local cluster, and prints the digest a local webhook receiver got. In
production run ``agentfleet beat`` and workers with ``AGENTFLEET_CONFIG`` naming the file.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from agentfleet import TaskContext, fleet_task, run_agent

__all__ = ["check_competitor", "post_digest"]

SCHEDULE = "nightly-competitors"
CONFIG = Path(__file__).resolve().parent / "nightly_digest.toml"
TONES = ("POSITIVE", "NEGATIVE", "NEUTRAL")


@fleet_task(name="examples.check_competitor", max_retries=2)
def check_competitor(ctx: TaskContext, name: str, changelog: str) -> dict[str, Any]:
    """One competitor's latest changelog entry, and how it reads (for us)."""
    prompt = (
        f"Classify the sentiment of the text. Answer with one word: {', '.join(TONES)}.\n\nText: {changelog}"
    )
    tone = run_agent(ctx, prompt=prompt, max_tokens=8, max_turns=1).text.strip().upper()
    return {"name": name, "tone": tone.lower(), "headline": changelog}


def post_digest(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The fan-in: one Slack incoming-webhook message with every competitor's news."""
    lines = [f"*Nightly competitor digest*: {len(results)} competitors checked"]
    for tone in ("negative", "positive", "neutral"):
        lines += [f"• [{r['tone']}] *{r['name']}*: {r['headline']}" for r in results if r["tone"] == tone]
    response = httpx.post(os.environ["DIGEST_WEBHOOK_URL"], json={"text": "\n".join(lines)}, timeout=10)
    response.raise_for_status()
    return {"posted": True, "competitors": len(results)}


@contextmanager
def webhook_receiver() -> Iterator[tuple[str, queue.Queue[dict[str, Any]]]]:
    """A stand-in for Slack on loopback: its URL, and a queue of the JSON bodies it got."""
    received: queue.Queue[dict[str, Any]] = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            received.put(json.loads(self.rfile.read(length)))
            self.send_response(200)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/digest", received
    finally:
        server.shutdown()
        server.server_close()


def main(argv: list[str] | None = None) -> int:
    from offline import offline_fleet

    from agentfleet.celery_config import scheduled_fanout_entries

    with webhook_receiver() as (url, received):
        env = {"AGENTFLEET_CONFIG": str(CONFIG), "DIGEST_WEBHOOK_URL": url}
        with offline_fleet("nightly_digest", env=env) as cluster:
            fleet = cluster.fleet()
            entry = scheduled_fanout_entries(fleet.settings)[f"schedule:{SCHEDULE}"]
            print(f"{SCHEDULE}: beat would send this at {entry['schedule']}; sending it now", file=sys.stderr)
            fleet.app.send_task(entry["task"], kwargs=entry["kwargs"], **entry["options"])
            try:
                digest = received.get(timeout=120)
            except queue.Empty:
                print("no digest arrived within 120 s", file=sys.stderr)
                return 1
            [run] = [r for r in fleet.runs(10) if r.name == SCHEDULE]
    print(digest["text"])
    print(
        f"\nrun {run.run_id}: {run.succeeded}/{run.tasks_total} checked, cost ${run.cost_usd:.4f}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
