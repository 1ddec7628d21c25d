"""The processes of ``bench/egress_proxy.py``, each apart so none shares a GIL with the proxy.

``python _egress_parts.py servers DIR``: the echo servers (HTTP and HTTPS, the test CA written
to DIR); prints one JSON line ``{"http": port, "https": port, "ca": path}`` and serves until
stdin closes. ``python _egress_parts.py client JSON``: measures one path and prints its figures
as one JSON line (latency of small keep-alive GETs in milliseconds, throughput of large GETs in
MB/s).
"""

from __future__ import annotations

import json
import ssl
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import httpx  # noqa: E402
from egress_support import echo_server, test_tls  # noqa: E402


def servers(directory: str) -> None:
    context, ca = test_tls(Path(directory))
    with echo_server() as plain, echo_server(context) as secure:
        print(json.dumps({"http": plain.port, "https": secure.port, "ca": str(ca)}), flush=True)
        sys.stdin.read()


def client(spec: dict[str, object]) -> None:
    verify = ssl.create_default_context(cafile=str(spec["ca"]))
    proxy = spec.get("proxy")
    headers = {"Authorization": "Bearer $CRED{tok}"} if spec.get("credential") else {}
    base = str(spec["base"])
    with httpx.Client(proxy=str(proxy) if proxy else None, verify=verify, trust_env=False) as http:
        for _ in range(20):
            http.get(f"{base}/echo", headers=headers).raise_for_status()
        took = []
        for _ in range(int(str(spec["requests"]))):
            started = time.perf_counter()
            http.get(f"{base}/echo", headers=headers).raise_for_status()
            took.append(time.perf_counter() - started)
        size = int(str(spec["size"]))
        started = time.perf_counter()
        moved = 0
        for _ in range(int(str(spec["downloads"]))):
            with http.stream("GET", f"{base}/bytes?n={size}", headers=headers) as response:
                for chunk in response.iter_bytes(65536):
                    moved += len(chunk)
        seconds = time.perf_counter() - started
    took.sort()
    print(
        json.dumps(
            {
                "p50_ms": statistics.median(took) * 1000,
                "p99_ms": took[int(len(took) * 0.99) - 1] * 1000,
                "mb_s": moved / seconds / 1e6,
            }
        )
    )


if __name__ == "__main__":
    if sys.argv[1] == "servers":
        servers(sys.argv[2])
    else:
        client(json.loads(sys.argv[2]))
