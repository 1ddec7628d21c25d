"""What keeping secrets out costs: the guard's search for credential values, and redaction.

Each figure is a ratio to a baseline measured in the same run, interleaved so both see the
same machine load:

- a request through the guard with three configured credentials (their values searched in
  URL, headers and body) against the same request through a guard with no vault, for a GET
  and for a 100 KB JSON POST (the size of a long Messages API call); the wire is an in-memory
  transport, so the ratio is the guard's own cost, before any network time;
- a delivery's redactor (the process's, plus the input's own secrets) redacting a 1 KB result,
  as each successful item does, against one Redis PING (a worker makes several Redis calls
  per item); and the same with the redactor built from the settings each time.

    .venv/bin/python bench/secret_scan.py [--samples 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable

import httpx
import redis

from agentfleet.config import CredentialSpec, FetchSettings, get_settings, reset_settings
from agentfleet.embedded_redis import EmbeddedRedis
from agentfleet.tasks.process_logging import process_redactor
from agentfleet.tools.guard import httpx_guard
from agentfleet.tools.vault import CredentialVault

BODY = json.dumps({"messages": [{"role": "user", "content": "lorem ipsum " * 8500}]}).encode()
RESULT = {"label": "positive", "text": "a review of the product " * 40, "scores": list(range(20))}


def _wire(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b"ok")


def _client(vault: CredentialVault | None) -> httpx.Client:
    guard = httpx_guard(
        settings=FetchSettings(),
        vault=vault,
        resolver=lambda host, port: ["93.184.216.34"],
        transport_factory=lambda: httpx.MockTransport(_wire),
    )
    return httpx.Client(transport=guard, trust_env=False)


def _vault() -> CredentialVault:
    environ = {f"KEY_{i}": f"sk-bench-{i}-{'x' * 40}" for i in range(3)}
    specs = {f"cred{i}": CredentialSpec(env=f"KEY_{i}", domains=["api.example"]) for i in range(3)}
    return CredentialVault(specs, environ=environ)


def _interleaved(a: Callable[[], object], b: Callable[[], object], samples: int) -> tuple[float, float]:
    """Median seconds of ``a`` and ``b``, run alternately."""
    times_a, times_b = [], []
    for _ in range(samples):
        start = time.perf_counter()
        a()
        times_a.append(time.perf_counter() - start)
        start = time.perf_counter()
        b()
        times_b.append(time.perf_counter() - start)
    return statistics.median(times_a), statistics.median(times_b)


def _report(label: str, measured: float, baseline: float, base_label: str) -> None:
    ratio = measured / baseline
    print(f"{label:<48} {measured * 1e6:8.1f} us  {ratio:5.2f}x {base_label} ({baseline * 1e6:.1f} us)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3000)
    args = parser.parse_args()
    plain, scanned = _client(None), _client(_vault())
    url = "https://api.example/v1/items?page=2"
    for name, send in (
        ("GET", lambda c: c.get(url, headers={"Authorization": "Bearer abc"})),
        (
            "100 KB JSON POST",
            lambda c: c.post(url, content=BODY, headers={"Content-Type": "application/json"}),
        ),
    ):
        base, measured = _interleaved(lambda s=send: s(plain), lambda s=send: s(scanned), args.samples)
        _report(f"guard, 3 credentials searched: {name}", measured, base, "no vault")

    os.environ["BENCH_VENDOR_KEY"] = "sk-bench-vendor-" + "y" * 40
    os.environ["AGENTFLEET_CREDENTIALS"] = json.dumps(
        {"vendor": {"env": "BENCH_VENDOR_KEY", "domains": ["a.b"]}}
    )
    os.environ["AGENTFLEET_LLM__API_KEY"] = "sk-ant-bench-" + "z" * 40
    reset_settings()
    inputs = {"text": "hello", "api_key": "sk-input-secret"}
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        client.ping()
        ping, redaction = _interleaved(
            client.ping, lambda: process_redactor().learn(inputs).value(RESULT), args.samples
        )
        _report("delivery redacts a 1 KB result", redaction, ping, "one Redis PING")
        ping, built = _interleaved(
            client.ping, lambda: get_settings().redactor().learn(inputs).value(RESULT), args.samples
        )
        _report("same, redactor built from the settings each time", built, ping, "one Redis PING")
        client.close()


if __name__ == "__main__":
    main()
