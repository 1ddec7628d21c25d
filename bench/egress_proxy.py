"""The egress proxy's cost: latency and throughput through it against a direct connection.

Local echo servers (HTTP, and HTTPS with a test CA) in a process of their own; a sandbox's
egress proxy in this process (as in a worker) with the real bridge (``bridge_argv``, the system
``python3``) in another, listening on loopback as it does inside a sandbox; each measurement a
client process of its own (httpx, keep-alive). For plain HTTP, HTTPS, and plain HTTP with a
credential filled in (so every response is searched for its value), it prints the median and
99th-percentile latency of small GETs (milliseconds) and the throughput of large GETs (MB/s),
direct and through the proxy, and their ratios, measured in the same run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="small GETs per path")
    parser.add_argument("--downloads", type=int, default=10, help="large GETs per path")
    parser.add_argument("--size-mb", type=float, default=8.0, help="size of one large GET")
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
            sock = Path(tmp) / "egress.sock"
            with EgressProxy(settings, spec, sock, run_id="bench", task_name="bench", wiring=EgressWiring(pools=pools)) as proxy:
                port = _free_port()
                bridge = subprocess.Popen(bridge_argv(str(sock), port, ["sleep", "3600"]))
                _wait_listening(port)
                common = {"requests": args.requests, "downloads": args.downloads, "size": int(args.size_mb * 1e6)}
                rows = []
                for label, scheme, credential in (
                    ("http", "http", False),
                    ("https", "https", False),
                    ("http + credential", "http", True),
                ):
                    base = f"{scheme}://127.0.0.1:{ports[scheme]}"
                    direct = _measure({**common, "base": base, "ca": ports["ca"]})
                    through = _measure(
                        {**common, "base": base, "ca": str(proxy.ca_cert_path), "proxy": f"http://127.0.0.1:{port}",
                         "credential": credential}
                    )  # fmt: skip
                    rows.append((label, direct, through))
            pools.close()
        finally:
            if bridge is not None:
                bridge.terminate()
                bridge.wait(10)
            servers.communicate("", timeout=10)
    print(f"# {args.requests} small GETs (latency) and {args.downloads} GETs of {args.size_mb:g} MB (throughput)")
    print(f"# per path, keep-alive, loopback; direct vs through the bridge and the egress proxy")
    print(f"{'path':18s} {'p50 ms':>16s} {'p99 ms':>16s} {'MB/s':>18s}   ratios (proxy/direct)")
    for label, direct, through in rows:
        print(
            f"{label:18s} {direct['p50_ms']:7.2f} {through['p50_ms']:8.2f} {direct['p99_ms']:7.2f} "
            f"{through['p99_ms']:8.2f} {direct['mb_s']:8.0f} {through['mb_s']:9.0f}   "
            f"p50 x{through['p50_ms'] / direct['p50_ms']:.1f}  p99 x{through['p99_ms'] / direct['p99_ms']:.1f}  "
            f"throughput x{through['mb_s'] / direct['mb_s']:.2f}"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
