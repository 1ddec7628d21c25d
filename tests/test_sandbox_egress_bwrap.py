"""Programs in a real bubblewrap sandbox (loopback only) reach the network through the egress
proxy: curl and python3's urllib reach declared destinations, are refused the others, get a
credential filled in over HTTP and HTTPS, and find its value nowhere they can read."""

from __future__ import annotations

import functools
import json
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from egress_support import SECRET, Echo, echo_server, test_tls

from agentfleet.config import Settings
from agentfleet.sandbox import SandboxSpec
from agentfleet.sandbox.egress import EgressProxy, EgressWiring, bridge_argv, proxy_env
from agentfleet.tools.pools import TransportPools

pytestmark = pytest.mark.slow

PORT_INSIDE = 3128
SOCKET_DIR_INSIDE = "/run/egress"
CA_INSIDE = "/run/agentfleet/egress-ca.pem"

# Searches everything the sandbox can read for a needle given reversed (so that neither its
# argv nor its source holds it): the environment, every regular file outside the read-only system
# image (/usr, the host's, holds nothing of the worker's), and of every process it can see,
# /proc/<pid>/{environ,cmdline} and readable memory (its own process aside: it holds the needle).
SEARCH = r"""
import json, os, stat, sys
needle = sys.argv[1][::-1].encode()
hits, looked = [], 0
def check(label, data):
    global looked
    looked += 1
    if needle in data:
        hits.append(label)
for key, value in os.environ.items():
    check("env:" + key, (key + "=" + value).encode())
for root, dirs, files in os.walk("/"):
    if root == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "sys", "usr")]
    for name in files:
        path = os.path.join(root, name)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            with open(path, "rb") as handle:
                check(path, handle.read(50_000_000))
        except OSError:
            pass
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for part in ("environ", "cmdline"):
        try:
            with open("/proc/%s/%s" % (pid, part), "rb") as handle:
                check("/proc/%s/%s" % (pid, part), handle.read())
        except OSError:
            pass
    if int(pid) == os.getpid():
        continue
    try:
        maps = open("/proc/%s/maps" % pid).read().splitlines()
        mem = open("/proc/%s/mem" % pid, "rb")
    except OSError:
        continue
    for line in maps:
        span, perms = line.split()[:2]
        if "r" not in perms:
            continue
        start, end = (int(x, 16) for x in span.split("-"))
        try:
            mem.seek(start)
            check("/proc/%s/mem" % pid, mem.read(end - start))
        except (OSError, ValueError, OverflowError):
            pass
print(json.dumps({"hits": hits, "looked": looked}))
"""


@dataclass
class Box:
    proxy: EgressProxy
    socket_dir: Path
    http: Echo
    https: Echo
    other: Echo

    def run(self, argv: list[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """``argv`` in a fresh sandbox behind the bridge; bubblewrap itself gets a clean environment."""
        env = {**proxy_env(PORT_INSIDE, CA_INSIDE), "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
        command = [
            "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
            "--bind", str(self.socket_dir), SOCKET_DIR_INSIDE,
            "--ro-bind", str(self.proxy.ca_cert_path), CA_INSIDE,
        ]  # fmt: skip
        for key, value in env.items():
            command += ["--setenv", key, value]
        inner = bridge_argv(f"{SOCKET_DIR_INSIDE}/egress.sock", PORT_INSIDE, argv)
        return subprocess.run(
            [*command, "--", *inner],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Box]:
    assert shutil.which("bwrap"), "bubblewrap is needed: apt-get install bubblewrap (make test installs it)"
    monkeypatch.setenv("EGRESS_TEST_TOKEN", SECRET)
    context, destination_ca = test_tls(tmp_path)
    settings = Settings(
        fetch={"allow_private_hosts": ["127.0.0.1"]},
        credentials={"tok": {"env": "EGRESS_TEST_TOKEN", "domains": ["127.0.0.1"]}},
    )
    upstream = ssl.create_default_context(cafile=str(destination_ca))
    pools = TransportPools(functools.partial(httpx.HTTPTransport, verify=upstream))
    socket_dir = tmp_path / "egress"
    socket_dir.mkdir()
    with echo_server() as plain, echo_server(context) as secure, echo_server() as other:
        spec = SandboxSpec(
            network=[f"127.0.0.1:{plain.port}", f"127.0.0.1:{secure.port}"], credentials=["tok"]
        )
        proxy = EgressProxy(
            settings,
            spec,
            socket_dir / "egress.sock",
            run_id="r",
            task_name="review",
            wiring=EgressWiring(pools=pools),
        )
        with proxy:
            yield Box(proxy, socket_dir, plain, secure, other)
    pools.close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_curl_reaches_a_declared_destination_with_a_credential_it_never_holds(box: Box, scheme: str) -> None:
    server = box.http if scheme == "http" else box.https
    url = f"{scheme}://127.0.0.1:{server.port}/echo"
    done = box.run(["curl", "-sS", "--fail-with-body", "-H", "Authorization: Bearer $CRED{tok}", url])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["headers"]["Authorization"] == "Bearer $CRED{tok}"
    assert server.seen == [("/echo", f"Bearer {SECRET}")]
    assert SECRET not in done.stdout + done.stderr


def test_curl_is_refused_an_undeclared_destination_with_a_clear_answer(box: Box) -> None:
    plain = box.run(["curl", "-sS", f"http://127.0.0.1:{box.other.port}/echo"])
    assert plain.returncode == 0
    assert "not among the network destinations" in plain.stdout
    tunnel = box.run(["curl", "-sS", f"https://127.0.0.1:{box.other.port}/echo"])
    assert tunnel.returncode == 56  # curl: the proxy refused the CONNECT
    assert "403" in tunnel.stderr
    assert box.other.seen == []


def test_python_urllib_uses_the_proxy_and_trusts_the_workers_ca(box: Box) -> None:
    code = (
        "import sys, urllib.request\n"
        "r = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer $CRED{tok}'})\n"
        "print(urllib.request.urlopen(r).read().decode())\n"
    )
    done = box.run(["python3", "-I", "-c", code, f"https://127.0.0.1:{box.https.port}/echo"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["headers"]["Authorization"] == "Bearer $CRED{tok}"
    assert box.https.seen == [("/echo", f"Bearer {SECRET}")]


def test_names_do_not_resolve_inside_and_the_proxy_refuses_undeclared_names(box: Box) -> None:
    lookup = box.run(["python3", "-I", "-c", "import socket; socket.getaddrinfo('example.com', 443)"])
    assert lookup.returncode == 1 and "gaierror" in lookup.stderr
    named = box.run(["curl", "-sS", "http://example.com/"])
    assert "refused http://example.com:80" in named.stdout


def test_no_credential_value_is_anywhere_the_sandbox_can_read(box: Box) -> None:
    planted = "planted-control-9d41c07be3"  # the search must find this one where it was put
    auth = "-H 'Authorization: Bearer $CRED{tok}'"
    fetch = (
        f"curl -sS -o /tmp/plain.json {auth} http://127.0.0.1:{box.http.port}/echo && "
        f"curl -sS -o /tmp/secure.json {auth} https://127.0.0.1:{box.https.port}/gzip && "
        "echo $PLANTED > /tmp/planted && "
        'python3 -I -S -c "$SEARCH" "$NEEDLE" && python3 -I -S -c "$SEARCH" "$CONTROL"'
    )
    needles = f"NEEDLE='{SECRET[::-1]}' CONTROL='{planted[::-1]}' PLANTED='{planted}'"
    done = box.run(
        ["sh", "-c", f"SEARCH='{SEARCH}' {needles} && export SEARCH NEEDLE CONTROL PLANTED && {fetch}"]
    )
    assert done.returncode == 0, done.stderr
    secret_report, control_report = (json.loads(line) for line in done.stdout.splitlines())
    assert secret_report["hits"] == []
    assert {"env:PLANTED", "/tmp/planted"} <= set(control_report["hits"])
    assert any(hit.endswith("/environ") for hit in control_report["hits"])
    assert any(hit.endswith("/mem") for hit in control_report["hits"])
    assert box.http.seen == [("/echo", f"Bearer {SECRET}")]
    assert box.https.seen == [("/gzip", f"Bearer {SECRET}")]


def test_the_bridge_returns_the_programs_exit_code(box: Box) -> None:
    assert box.run(["sh", "-c", "exit 7"]).returncode == 7
    missing = box.run(["no-such-program"])
    assert missing.returncode == 127 and "no-such-program" in missing.stderr
