"""Plain Celery tasks run twice after a worker is SIGKILLed mid-run: kombu's transport against agentfleet's.

One embedded Redis. In each of ``--runs`` runs per transport, in turn: one plain Celery worker
(``plain_app``, a ``--pool`` of ``--concurrency`` slots, visibility timeout ``--visibility-s``)
on kombu's own Redis transport or agentfleet's (``PLAIN_TRANSPORT``); ``--tasks`` tasks of
``plain.counted`` (sleep ``--sleep-s``, then count the run in Redis) published at a steady
``--rate`` a second, below what either worker carries, so both run the same number of tasks a
second (a gevent worker on kombu's transport stalls up to 2 s whenever its window is full: at
a backlog it runs fewer tasks, and a kill then finds fewer finishing). At a random moment
between 40% and 60% of the publishing, the worker is SIGKILLed (its whole process group); a
fresh one (a threads pool: its event loop's timer takes back what the first left
unacknowledged once the visibility timeout passes, which a gevent worker's loop of kombu 5.7
never does) finishes the rest. A task that counted twice had finished its body but its
acknowledgement had not reached Redis when the worker died; one that never counted was lost (a
message taken by a ``BRPOP`` and not yet recorded as unacknowledged). Prints, per transport,
how many tasks ran twice and how many were lost in each run.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
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


def _settled(client: redis.Redis, queue: str) -> bool:
    suffixes = ("", "\x06\x163", "\x06\x166", "\x06\x169")  # kombu's priority steps
    return not client.hlen("unacked") and not any(client.llen(f"{queue}{s}") for s in suffixes)


def one_run(url: str, client: redis.Redis, transport: str, args: argparse.Namespace) -> tuple[int, int, int]:
    """Tasks that ran twice, tasks lost, and tasks the first worker had finished when it was
    killed, in one run with a kill."""
    env = {"PLAIN_TRANSPORT": transport, "PLAIN_VISIBILITY_S": str(args.visibility_s)}
    tokens = [uuid.uuid4().hex for _ in range(args.tasks)]
    with PlainWorkers(url, pool=args.pool, concurrency=args.concurrency, env=env) as first:
        app = first.app

        def publish() -> None:
            with app.producer_or_acquire() as producer:
                start = time.monotonic()
                for n, token in enumerate(tokens):
                    time.sleep(max(0.0, start + n / args.rate - time.monotonic()))
                    app.send_task(
                        "plain.counted", args=[token, args.sleep_s], producer=producer, ignore_result=True
                    )

        publisher = threading.Thread(target=publish)
        publisher.start()
        time.sleep(random.uniform(0.4, 0.6) * args.tasks / args.rate)
        first.kill()
        finished = sum(1 for n in _counts(client, tokens) if n)
        publisher.join()
    with PlainWorkers(url, pool="threads", concurrency=args.concurrency, env=env):
        deadline = time.monotonic() + 300
        while not (all(_counts(client, tokens)) and _settled(client, "plain")):
            if _settled(client, "plain"):
                time.sleep(2.0)  # what the second worker holds is acknowledged by now
                if _settled(client, "plain"):
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the second worker never finished")
            time.sleep(0.2)
    counts = _counts(client, tokens)
    return sum(1 for n in counts if n > 1), sum(1 for n in counts if not n), finished


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pool", default="gevent")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--sleep-s", type=float, default=0.05)
    parser.add_argument("--rate", type=float, default=200.0, help="tasks published per second")
    parser.add_argument("--visibility-s", type=float, default=5.0)
    args = parser.parse_args()
    found: dict[str, list[tuple[int, int, int]]] = {name: [] for name in TRANSPORTS}
    with EmbeddedRedis() as server, redis.Redis.from_url(server.url) as client:
        for _ in range(args.runs):
            for name, transport in TRANSPORTS.items():
                found[name].append(one_run(server.url, client, transport, args))
                twice, lost, finished = found[name][-1]
                print(
                    f"{name}: ran twice {twice}, lost {lost} ({finished} finished before the kill)",
                    flush=True,
                )
    print(
        f"# {args.tasks} plain tasks of {args.sleep_s}s, {args.pool} x {args.concurrency}, one SIGKILL a run"
    )
    for name, runs in found.items():
        doubles = ", ".join(str(t) for t, _, _ in runs)
        losses = ", ".join(str(n) for _, n, _ in runs)
        total, finished = sum(t for t, _, _ in runs), sum(f for _, _, f in runs)
        print(
            f"{name:>10}: ran twice {doubles} (total {total}, {1000 * total / finished:.1f} per 1,000 tasks "
            f"finished before the kills); lost {losses} (of {args.tasks} each run)"
        )


if __name__ == "__main__":
    main()
