"""What keeping a failed item's artifacts costs its dead letter.

Each figure is a ratio to a baseline measured in the same run, interleaved so both see the
same machine load:

- collecting a workspace's artifacts (``collect_artifacts``: a walk that follows no link,
  ``openat`` at each step, the caps, names, content types; text redacted) against reading the
  same files with ``Path.read_bytes``, for a workspace of a screenshot, a log and a report, and
  for one of 2,000 files of which 20 match;
- writing a dead letter with 4 MiB of artifacts (the default total cap) against writing the
  same dead letter without them, on an embedded Redis.

    .venv/bin/python bench/artifacts.py [--samples 30]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from agentfleet.dlq import DeadLetterArtifact, DLQStore, dead_letter_id
from agentfleet.dlq.evidence import ArtifactCaps, collect_artifacts, pattern_regex
from agentfleet.dlq.model import DeadLetter
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.redaction import Redactor

CAPS = ArtifactCaps()
PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(300_000)


def _interleaved(a: Callable[[], object], b: Callable[[], object], samples: int) -> tuple[float, float]:
    """Median seconds of ``a`` and ``b``, run alternately."""
    times_a: list[float] = []
    times_b: list[float] = []
    for _ in range(samples):
        for fn, times in ((a, times_a), (b, times_b)):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
    return statistics.median(times_a), statistics.median(times_b)


def _small(root: Path) -> list[str]:
    (root / "screens").mkdir()
    (root / "screens" / "fail.png").write_bytes(PNG)
    (root / "run.log").write_bytes(b"step working fine\n" * 100_000)
    (root / "junit.xml").write_bytes(b"<testsuite>" + b"<testcase/>" * 5000 + b"</testsuite>")
    return ["**/*.png", "*.log", "*.xml"]


def _wide(root: Path) -> list[str]:
    for d in range(40):
        sub = root / f"pkg{d}"
        sub.mkdir()
        for f in range(50):
            (sub / f"m{f}.py").write_bytes(b"x = 1\n" * 50)
    for i in range(20):
        (root / f"out{i}.log").write_bytes(b"line\n" * 2000)
    return ["*.log"]


def _plain_read(root: Path, patterns: list[str]) -> None:
    regexes = [pattern_regex(p) for p in patterns]
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and any(rx.fullmatch(rel) for rx in regexes):
            path.read_bytes()[: CAPS.file_bytes]


def _collection(samples: int) -> None:
    redactor = Redactor.build(values=["sk-bench-" + "y" * 40])
    for label, make in (("screenshot, log, report", _small), ("2,000 files, 20 match", _wide)):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            patterns = make(root)
            ours, plain = _interleaved(
                functools.partial(collect_artifacts, root, patterns, CAPS, redactor=redactor),
                functools.partial(_plain_read, root, patterns),
                samples,
            )
        print(
            f"collect ({label}): {ours * 1000:.2f} ms "
            f"vs plain reads {plain * 1000:.2f} ms: x{ours / plain:.2f}"
        )


def _entry(artifacts: list[DeadLetterArtifact]) -> DeadLetter:
    key = uuid.uuid4().hex
    now = time.time()
    return DeadLetter(
        id=dead_letter_id(key),
        task_name="bench.task",
        task_id=key,
        run_id=key[:16],
        item_key="0",
        idempotency_key=key,
        error_type="RuntimeError",
        error="the checkout page never loaded",
        category="unknown",
        fingerprint="f" * 16,
        first_failure_at=now,
        last_failure_at=now,
        artifacts=artifacts,
    )


def _storage(samples: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(4):
            (root / f"big{i}.bin").write_bytes(os.urandom(CAPS.file_bytes))
        found = collect_artifacts(root, ["*.bin"], CAPS)
    with EmbeddedRedis() as server:
        client: Any = redis.Redis.from_url(server.url, decode_responses=True)
        store = DLQStore(client, prefix="bench")
        kept = sum(len(v) for v in found.data.values())
        ours, plain = _interleaved(
            lambda: store.add(_entry(found.artifacts), found.data),
            lambda: store.add(_entry([])),
            samples,
        )
        print(
            f"store a dead letter with {kept / 2**20:.0f} MiB of artifacts: {ours * 1000:.2f} ms "
            f"vs without {plain * 1000:.2f} ms: x{ours / plain:.1f}"
        )
        # How long Redis itself is busy with the write (other clients wait that long).
        store.client.config_set("slowlog-log-slower-than", 0)
        store.client.slowlog_reset()
        store.add(_entry(found.artifacts), found.data)
        busy = max(entry["duration"] for entry in store.client.slowlog_get(10)) / 1000
        store.client.slowlog_reset()
        store.add(_entry([]))
        idle = max(entry["duration"] for entry in store.client.slowlog_get(10)) / 1000
        print(f"  Redis busy with that write: {busy:.2f} ms vs {idle:.3f} ms without: x{busy / idle:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    _collection(args.samples)
    _storage(args.samples)


if __name__ == "__main__":
    main()
