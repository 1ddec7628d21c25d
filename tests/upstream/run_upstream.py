"""Run kombu's and Celery's own Redis integration tests with kombu's stock Redis transport and
with agentfleet's, and compare them test by test (``make test-upstream``).

For each suite (``suites.SUITES``) and each transport, the sdist's tests at the installed
version run against a fresh embedded Redis (or the Redis at ``AGENTFLEET_BROKER_URL``, host
and port only, no password: the suites' own tests build their URLs from them). Exit status:
0 when no test fares worse with agentfleet's transport than with the stock one except those
listed in ``known_differences.toml``; 1 when one does; 2 when a run could not complete.

Run it with the upstream venv's Python, ``tests/`` on the path
(``PYTHONPATH=tests .venv-upstream/bin/python -m upstream.run_upstream``); that venv must hold
the same celery, kombu and redis as the project's ``.venv`` (checked).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

from agentfleet.embedded_redis import EmbeddedRedis
from upstream import compare, sources
from upstream.report import render, write_summary
from upstream.suites import SUITES, TRANSPORTS, RunOutcome, run, stop_all

ROOT = Path(__file__).resolve().parents[2]
KNOWN = Path(__file__).resolve().parent / "known_differences.toml"
DOCS = ROOT / "docs" / "guarantees.md"


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--suite", action="append", choices=sorted(SUITES), help="default: every suite")
    parser.add_argument(
        "--cache",
        type=Path,
        default=ROOT / ".cache" / "upstream",
        help="sdists, test trees and results (default: .cache/upstream)",
    )
    parser.add_argument(
        "--reference-python",
        type=Path,
        default=ROOT / ".venv" / "bin" / "python",
        help="the project venv's Python, whose celery/kombu/redis versions must match",
    )
    parser.add_argument(
        "--transport",
        action="append",
        choices=TRANSPORTS,
        help="run only this transport (default: both); the other's results are the last run's",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=len(SUITES) * len(TRANSPORTS),
        help="runs at a time, each on its own embedded Redis (default: all; the suites mostly wait)",
    )
    parser.add_argument(
        "--compare-only",
        action="store_true",
        help="compare the JUnit XML of the last runs without running anything",
    )
    return parser.parse_args(argv)


def _external_redis() -> tuple[str, int] | None:
    """``AGENTFLEET_BROKER_URL``'s host and port, when it is set."""
    url = os.environ.get("AGENTFLEET_BROKER_URL")
    if not url:
        return None
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 6379


def _run_one(name: str, transport: str, archive: Path, cache: Path) -> RunOutcome:
    """One suite with one transport, from a fresh copy of its tests, against the external Redis
    or a fresh embedded one (stopped by its pid when the run ends)."""
    tree = sources.unpack_tests(archive, cache / "runs" / f"{name}-{transport}")
    print(f"{name} with the {transport} transport: started", flush=True)
    with ExitStack() as stack:
        address = _external_redis()
        if address is None:
            server = stack.enter_context(EmbeddedRedis())
            address = ("127.0.0.1", server.port)
        outcome = run(SUITES[name], transport, tree, cache / "results", *address)
    print(
        f"{name} with the {transport} transport: {outcome.wall_s:.0f} s, exit code {outcome.exit_code}",
        flush=True,
    )
    return outcome


def _run_all(
    plan: list[tuple[str, str]], cache: Path, versions: dict[str, str], jobs: int
) -> dict[tuple[str, str], RunOutcome]:
    """Every (suite, transport) of ``plan``, ``jobs`` at a time (one at a time on an external
    Redis: the suites' queue names are fixed, so two runs on one Redis would share them)."""
    archives = {
        name: sources.sdist(cache, SUITES[name].dist, versions[SUITES[name].dist]) for name, _ in plan
    }
    workers = 1 if _external_redis() else max(1, jobs)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {key: pool.submit(_run_one, *key, archives[key[0]], cache) for key in plan}
        return {key: future.result() for key, future in futures.items()}


def _previous_run(name: str, transport: str, cache: Path) -> RunOutcome:
    """The last run's results, for a comparison that does not run that suite and transport again."""
    results = cache / "results"
    junit, log = results / f"{name}-{transport}.xml", results / f"{name}-{transport}.log"
    return RunOutcome(name, transport, 1 if junit.is_file() else None, 0.0, junit, log)


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM or SIGINT: stop the runs under way (their Redis servers stop as they return)."""
    stop_all()
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _interrupted)
    names = args.suite or list(SUITES)
    started = time.monotonic()
    try:
        known = compare.load_known(KNOWN, DOCS, ROOT, set(SUITES))
        versions = sources.check_same_versions(args.reference_python)
        plan = [] if args.compare_only else [(n, t) for n in names for t in args.transport or TRANSPORTS]
        ran = _run_all(plan, args.cache, versions, args.jobs)
    except (sources.SourceError, compare.KnownDifferenceError) as exc:
        print(f"test-upstream: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("test-upstream: interrupted; every run stopped", file=sys.stderr)
        return 130
    outcomes = [ran.get((n, t)) or _previous_run(n, t, args.cache) for n in names for t in TRANSPORTS]
    text, status = render(outcomes, known, versions, time.monotonic() - started)
    print(text)
    write_summary(args.cache / "results" / "summary.txt", text)
    return status


if __name__ == "__main__":
    sys.exit(main())
