"""The egress proxy's cost: latency and throughput through it against a direct connection.

Local echo servers (HTTP, and HTTPS with a test CA) in a process of their own; a sandbox's
egress proxy in this process (as in a worker) with the real bridge (``bridge_argv``, the
system ``python3``) in another, listening on loopback as it does inside a sandbox; each
measurement a client process of its own (the standard library's ``http.client``, one
keep-alive connection). For plain HTTP, HTTPS, and plain HTTP with a credential filled in (so
every response is searched for its value), it prints the median and 99th-percentile latency
of small GETs (milliseconds) and the throughput of large GETs (MB/s), direct and through the
proxy, and their ratios, measured in the same run (alternating rounds, medians).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import httpx  # noqa: E402

from agentfleet.config import Settings  # noqa: E402
from agentfleet.sandbox import SandboxSpec  # noqa: E402
from agentfleet.sandbox.egress import EgressProxy, EgressWiring, bridge_argv  # noqa: E402
from agentfleet.tools.pools import TransportPools  # noqa: E402

PARTS = str(HERE / "_egress_parts.py")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(port: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"the bridge did not listen on {port}")


def _measure(spec: dict[str, object]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, PARTS, "client", json.dumps(spec)], capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout))


PATHS = (("http", "http", False), ("https", "https", False), ("http + credential", "http", True))

Row = tuple[str, dict[str, float], dict[str, float]]


def _median(samples: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(sample[key] for sample in samples) for key in samples[0]}


def _measure_paths(
    args: argparse.Namespace, ports: dict[str, Any], proxy: EgressProxy, port: int
) -> list[Row]:
    """Each path direct and through the proxy, alternating, ``args.rounds`` times; medians."""
    common = {"requests": args.requests, "downloads": args.downloads, "size": int(args.size_mb * 1e6)}
    found: dict[str, tuple[list[dict[str, float]], list[dict[str, float]]]] = {p[0]: ([], []) for p in PATHS}
    for _ in range(args.rounds):
        for label, scheme, credential in PATHS:
            target = {"scheme": scheme, "port": ports[scheme]}
            found[label][0].append(_measure({**common, **target, "ca": ports["ca"]}))
            through = {"ca": str(proxy.ca_cert_path), "proxy_port": port, "credential": credential}
            found[label][1].append(_measure({**common, **target, **through}))
    return [(label, _median(direct), _median(proxied)) for label, (direct, proxied) in found.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="small GETs per path")
    parser.add_argument("--downloads", type=int, default=10, help="large GETs per path")
    parser.add_argument("--size-mb", type=float, default=8.0, help="size of one large GET")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians are shown)")
    args = parser.parse_args()
    os.environ["BENCH_EGRESS_TOKEN"] = "bench-egress-credential-0123456789"
    with tempfile.TemporaryDirectory() as tmp:
        servers = subprocess.Popen(
            [sys.executable, PARTS, "servers", tmp], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        bridge = None
        try:
            assert servers.stdout is not None
            ports = json.loads(servers.stdout.readline())
            settings = Settings(
                fetch={"allow_private_hosts": ["127.0.0.1"]},
                credentials={"tok": {"env": "BENCH_EGRESS_TOKEN", "domains": ["127.0.0.1"]}},
                egress={"max_response_bytes": 10**10},
            )
            spec = SandboxSpec(
                network=[f"127.0.0.1:{ports['http']}", f"127.0.0.1:{ports['https']}"], credentials=["tok"]
            )
            upstream = ssl.create_default_context(cafile=ports["ca"])
            pools = TransportPools(functools.partial(httpx.HTTPTransport, verify=upstream))
            wiring = EgressWiring(pools=pools)
            sock = Path(tmp) / "egress.sock"
            with EgressProxy(settings, spec, sock, run_id="bench", task_name="bench", wiring=wiring) as proxy:
                port = _free_port()
                bridge = subprocess.Popen(bridge_argv(str(sock), port, ["sleep", "3600"]))
                _wait_listening(port)
                rows = _measure_paths(args, ports, proxy, port)
            pools.close()
        finally:
            if bridge is not None:
                bridge.terminate()
                bridge.wait(10)
            servers.communicate("", timeout=10)
    _report(args, rows)


def _report(args: argparse.Namespace, rows: list[Row]) -> None:
    size = f"{args.size_mb:g} MB"
    print(f"# {args.requests} small GETs (latency) and {args.downloads} GETs of {size} (throughput);")
    print(f"# median of {args.rounds} alternating rounds")
    print("# per path, keep-alive, loopback; direct vs through the bridge and the egress proxy")
    print(f"{'path':18s} {'p50 ms':>16s} {'p99 ms':>16s} {'MB/s':>18s}   ratios (proxy/direct)")
    for label, direct, through in rows:
        p50 = through["p50_ms"] / direct["p50_ms"]
        p99 = through["p99_ms"] / direct["p99_ms"]
        print(
            f"{label:18s} {direct['p50_ms']:7.2f} {through['p50_ms']:8.2f} {direct['p99_ms']:7.2f} "
            f"{through['p99_ms']:8.2f} {direct['mb_s']:8.0f} {through['mb_s']:9.0f}   "
            f"p50 x{p50:.1f}  p99 x{p99:.1f}  throughput x{through['mb_s'] / direct['mb_s']:.2f}"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
