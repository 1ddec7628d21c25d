"""Plain Celery tasks run twice after a worker is SIGKILLed mid-run: kombu's transport against agentfleet's.

One embedded Redis. In each of ``--runs`` runs per transport, in turn: one plain Celery worker
(``plain_app``, a ``--pool`` of ``--concurrency`` slots, visibility timeout ``--visibility-s``)
on kombu's own Redis transport or agentfleet's (``PLAIN_TRANSPORT``), ``--tasks`` tasks of
``plain.counted`` (sleep ``--sleep-s``, then count the run in Redis); once half of them have
counted, the worker is SIGKILLed (its whole process group) and a fresh one (a threads pool: its
event loop's timer takes back what the first left unacknowledged once the visibility timeout
passes, which a gevent worker's loop of kombu 5.7 never does) finishes the rest. A task that
counted twice had finished its body but its acknowledgement had not reached Redis when the
worker died. Prints, per transport, how many tasks ran twice in each run.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _plain import PlainWorkers  # noqa: E402

from agentfleet.embedded_redis import EmbeddedRedis  # noqa: E402

TRANSPORTS = {"kombu": "", "agentfleet": "agentfleet.transport.redis_channel:RedisTransport"}


def _counts(client: redis.Redis, tokens: list[str]) -> list[int]:
    return [int(n or 0) for n in client.mget([f"plain:runs:{t}" for t in tokens])]


def one_run(url: str, client: redis.Redis, transport: str, args: argparse.Namespace) -> int:
    """Tasks that ran twice in one run with a kill halfway."""
    env = {"PLAIN_TRANSPORT": transport, "PLAIN_VISIBILITY_S": str(args.visibility_s)}
    tokens = [uuid.uuid4().hex for _ in range(args.tasks)]
    with PlainWorkers(url, pool=args.pool, concurrency=args.concurrency, env=env) as first:
        app = first.app
        with app.producer_or_acquire() as producer:
            for token in tokens:
                app.send_task(
                    "plain.counted", args=[token, args.sleep_s], producer=producer, ignore_result=True
                )
        deadline = time.monotonic() + 300
        while sum(1 for n in _counts(client, tokens) if n) < args.tasks // 2:
            if time.monotonic() > deadline:
                raise RuntimeError("the first worker never got halfway")
            time.sleep(0.005)
        first.kill()
    with PlainWorkers(url, pool="threads", concurrency=args.concurrency, env=env):
        deadline = time.monotonic() + 300
        while not all(_counts(client, tokens)) or client.hlen("unacked"):
            if time.monotonic() > deadline:
                raise RuntimeError("the second worker never finished")
            time.sleep(0.2)
    return sum(1 for n in _counts(client, tokens) if n > 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pool", default="gevent")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--sleep-s", type=float, default=0.05)
    parser.add_argument("--visibility-s", type=float, default=5.0)
    args = parser.parse_args()
    found: dict[str, list[int]] = {name: [] for name in TRANSPORTS}
    with EmbeddedRedis() as server, redis.Redis.from_url(server.url) as client:
        for _ in range(args.runs):
            for name, transport in TRANSPORTS.items():
                found[name].append(one_run(server.url, client, transport, args))
                print(f"{name}: ran twice {found[name][-1]} of {args.tasks}", flush=True)
    print(f"# {args.tasks} plain tasks of {args.sleep_s}s, {args.pool} x {args.concurrency}, SIGKILL halfway")
    for name, doubles in found.items():
        print(f"{name:>10}: ran twice {', '.join(map(str, doubles))} (of {args.tasks} each run)")


if __name__ == "__main__":
    main()
