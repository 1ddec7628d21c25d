"""The processes of ``bench/egress_proxy.py``, each apart so none shares a GIL with the proxy.

``python _egress_parts.py servers DIR``: the echo servers (HTTP and HTTPS, the test CA written
to DIR); prints one JSON line ``{"http": port, "https": port, "ca": path}`` and serves until
stdin closes. ``python _egress_parts.py client JSON``: measures one path with the standard
library's ``http.client`` (one keep-alive connection; through the proxy, absolute-form requests
for HTTP and a ``CONNECT`` tunnel for HTTPS) and prints its figures as one JSON line (latency
of small GETs in milliseconds, throughput of large GETs in MB/s).
"""

from __future__ import annotations

import http.client
import json
import ssl
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from egress_support import echo_server, test_tls  # noqa: E402


def servers(directory: str) -> None:
    context, ca = test_tls(Path(directory))
    with echo_server() as plain, echo_server(context) as secure:
        print(json.dumps({"http": plain.port, "https": secure.port, "ca": str(ca)}), flush=True)
        sys.stdin.read()


def _connection(spec: dict[str, object]) -> tuple[http.client.HTTPConnection, str]:
    """A keep-alive connection for ``spec``'s path, and the prefix of its request targets."""
    scheme, host, port = str(spec["scheme"]), "127.0.0.1", int(str(spec["port"]))
    proxy = spec.get("proxy_port")
    context = ssl.create_default_context(cafile=str(spec["ca"]))
    if proxy is None:
        if scheme == "https":
            return http.client.HTTPSConnection(host, port, context=context), ""
        return http.client.HTTPConnection(host, port), ""
    if scheme == "https":
        conn = http.client.HTTPSConnection(host, int(str(proxy)), context=context)
        conn.set_tunnel(host, port)
        return conn, ""
    return http.client.HTTPConnection(host, int(str(proxy))), f"http://{host}:{port}"


def client(spec: dict[str, object]) -> None:
    headers = {"Authorization": "Bearer $CRED{tok}"} if spec.get("credential") else {}
    conn, prefix = _connection(spec)

    def get(path: str) -> int:
        conn.request("GET", prefix + path, headers=headers)
        response = conn.getresponse()
        moved = 0
        while chunk := response.read(65536):
            moved += len(chunk)
        assert response.status == 200, response.status
        return moved

    for _ in range(20):
        get("/echo")
    took = []
    for _ in range(int(str(spec["requests"]))):
        started = time.perf_counter()
        get("/echo")
        took.append(time.perf_counter() - started)
    size = int(str(spec["size"]))
    started = time.perf_counter()
    moved = sum(get(f"/bytes?n={size}") for _ in range(int(str(spec["downloads"]))))
    seconds = time.perf_counter() - started
    conn.close()
    took.sort()
    figures = {
        "p50_ms": statistics.median(took) * 1000,
        "p99_ms": took[int(len(took) * 0.99) - 1] * 1000,
        "mb_s": moved / seconds / 1e6,
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    if sys.argv[1] == "servers":
        servers(sys.argv[2])
    else:
        client(json.loads(sys.argv[2]))
