"""A hostile corpus, each case run in a real bubblewrap sandbox with real processes.

Every case ends with the host unharmed (checked on the host's side: the file, the Redis
server, the socket's far end), the worker (this process) alive, a clear result, and no
process of the sandbox's user left (``bwrap_sandbox`` checks that as it closes).
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sandbox_support import bwrap_sandbox

from agentfleet.sandbox.procs import processes_of
from agentfleet.sandbox.workspace import Workspace

CANARY = f"canary-{uuid.uuid4().hex}"
PY = "/usr/bin/python3"


@pytest.fixture
def workspace() -> Iterator[Path]:
    made = Workspace(None, None)
    yield made.path
    made.remove()


def test_the_workers_environment_is_out_of_reach(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFLEET_REDIS_PASSWORD", CANARY)
    script = f"cat /proc/1/environ /proc/{os.getpid()}/environ; env; cat /proc/*/environ; cat /proc/*/cmdline"
    with bwrap_sandbox(workspace) as sandbox:
        result = sandbox.run(["sh", "-c", script])
    assert CANARY not in result.stdout + result.stderr
    assert "PATH=" in result.stdout, "the program ran and saw its own environment"


def test_a_secret_file_beside_the_worker_and_etc_shadow_cannot_be_read(workspace: Path) -> None:
    beside = Path.cwd() / f".sandbox-secret-{uuid.uuid4().hex}"
    beside.write_text(CANARY)
    beside.chmod(0o644)
    root_only = workspace / "root-only"
    root_only.write_text(CANARY)
    try:
        with bwrap_sandbox(workspace) as sandbox:
            os.chown(root_only, 0, 0)
            root_only.chmod(0o600)
            script = f"cat {beside}; cat /workspace/root-only; echo shadow:[$(cat /etc/shadow)]; ls /root"
            result = sandbox.run(["sh", "-c", script])
    finally:
        beside.unlink()
    assert CANARY not in result.stdout
    assert "Permission denied" in result.stderr, "the root-owned 0600 file is refused"
    assert "shadow:[]" in result.stdout, "the host's /etc/shadow is hidden under an empty file"
    assert result.exit_code != 0


def test_writes_outside_the_workspace_fail_and_tmp_is_private(workspace: Path) -> None:
    marker = f"x-{uuid.uuid4().hex}"
    script = (
        f"touch /usr/{marker} /etc/{marker} /{marker}; "
        f"echo hi > /tmp/{marker} && echo tmp-ok; echo ok > /workspace/out"
    )
    with bwrap_sandbox(workspace) as sandbox:
        result = sandbox.run(["sh", "-c", script])
    assert "tmp-ok" in result.stdout
    assert (workspace / "out").read_text() == "ok\n"
    for place in ("/usr", "/etc", "/", "/tmp"):
        assert not (Path(place) / marker).exists()


def test_the_hosts_redis_on_loopback_is_unreachable(workspace: Path, redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    port = client.connection_pool.connection_kwargs["port"]
    before = int(client.info("stats")["total_connections_received"])
    code = (
        f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
        " print('CONNECTED')\nexcept OSError as e:\n print('refused', e)"
    )
    with bwrap_sandbox(workspace) as sandbox:
        result = sandbox.run([PY, "-c", code])
    assert "refused" in result.stdout and "CONNECTED" not in result.stdout
    after = int(client.info("stats")["total_connections_received"])
    assert after - before <= 1, "only this test's own INFO connection reached the server"
    assert client.ping()
    client.close()


def test_the_workers_unix_sockets_are_unreachable(workspace: Path, tmp_path: Path) -> None:
    path = tmp_path / "worker.sock"
    named = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    named.bind(str(path))
    path.chmod(0o777)
    named.listen()
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind(f"\0agentfleet-worker-{CANARY}")
    abstract.listen()
    code = (
        "import socket\n"
        f"for addr in ({str(path)!r}, '\\0agentfleet-worker-{CANARY}'):\n"
        " s = socket.socket(socket.AF_UNIX)\n"
        " try:\n  s.connect(addr); print('CONNECTED')\n except OSError as e:\n  print('blocked', e)\n"
    )
    try:
        with bwrap_sandbox(workspace) as sandbox:
            result = sandbox.run([PY, "-c", code])
        assert result.stdout.count("blocked") == 2, result
        for listener in (named, abstract):
            listener.setblocking(False)
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        named.close()
        abstract.close()


def test_dns_resolves_nothing(workspace: Path) -> None:
    code = (
        "import socket\ntry:\n print(socket.getaddrinfo('example.com', 443))\n"
        "except OSError as e:\n print('no-dns', e)"
    )
    with bwrap_sandbox(workspace) as sandbox:
        result = sandbox.run([PY, "-c", code])
        lookup = sandbox.run(["getent", "hosts", "example.com"])
    assert "no-dns" in result.stdout
    assert lookup.exit_code != 0 and lookup.stdout == ""


def test_a_fork_bomb_is_held_to_its_process_limit(workspace: Path) -> None:
    code = "import os, time\nwhile True:\n try:\n  os.fork()\n except OSError:\n  time.sleep(0.01)"
    with bwrap_sandbox(workspace, limits={"processes": 32, "wall_s": 4}) as sandbox:
        result = sandbox.run([PY, "-c", code])
        uid = sandbox.uid
    assert result.timed_out
    assert processes_of(uid) == []
    assert subprocess.run(["true"]).returncode == 0, "the host can still start processes"


def test_a_memory_bomb_fails_within_its_memory_limit(workspace: Path) -> None:
    code = "blocks = []\nwhile True:\n blocks.append(bytearray(16 * 1024 * 1024))"
    with bwrap_sandbox(workspace, limits={"memory_mb": 256, "wall_s": 30}) as sandbox:
        result = sandbox.run([PY, "-c", code])
    assert not result.timed_out
    assert result.exit_code != 0
    assert "MemoryError" in result.stderr


def test_filling_the_disk_stops_at_the_file_size_limit(workspace: Path) -> None:
    script = (
        "head -c 64M /dev/zero > /workspace/big; echo rc=$?; head -c 64M /dev/zero > /tmp/big; echo rc=$?"
    )
    with bwrap_sandbox(workspace, limits={"file_size_mb": 4, "wall_s": 30}) as sandbox:
        result = sandbox.run(["sh", "-c", script])
    assert not result.timed_out
    assert result.stdout.count("rc=0") == 0, result
    assert (workspace / "big").stat().st_size <= 4 * 1024 * 1024


def test_a_setuid_binary_gains_nothing(workspace: Path) -> None:
    with bwrap_sandbox(workspace) as sandbox:
        target = workspace / "id"
        target.write_bytes(Path("/usr/bin/id").read_bytes())
        os.chown(target, 0, 0)
        target.chmod(0o4755)
        result = sandbox.run(["/workspace/id", "-u"])
        status = sandbox.run(["sh", "-c", "grep -E 'NoNewPrivs|CapEff|CapBnd|Seccomp:' /proc/self/status"])
    assert result.stdout.strip() == "65534"
    assert "NoNewPrivs:\t1" in status.stdout
    assert "CapEff:\t0000000000000000" in status.stdout
    assert "CapBnd:\t0000000000000000" in status.stdout
    assert "Seccomp:\t2" in status.stdout


def test_ptrace_of_another_process_is_refused(workspace: Path) -> None:
    code = (
        "import ctypes, os, subprocess\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "child = subprocess.Popen(['sleep', '30'])\n"
        "for pid in (child.pid, 1):\n"
        " r = libc.ptrace(16, pid, 0, 0)\n"
        " print('ptrace', pid, r, os.strerror(ctypes.get_errno()))\n"
        "child.kill()"
    )
    with bwrap_sandbox(workspace) as sandbox:
        result = sandbox.run([PY, "-c", code])
    lines = [line for line in result.stdout.splitlines() if line.startswith("ptrace")]
    assert len(lines) == 2 and all(" -1 Operation not permitted" in line for line in lines), result


def test_a_daemon_that_double_forks_does_not_outlive_the_run(workspace: Path) -> None:
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        " os.setsid()\n"
        " if os.fork() == 0:\n"
        "  while True:\n"
        "   open('/workspace/beat', 'a').write('.')\n"
        "   time.sleep(0.05)\n"
        " os._exit(0)\n"
        "time.sleep(0.3)\n"
        "print('parent done')"
    )
    with bwrap_sandbox(workspace) as sandbox:
        result = sandbox.run([PY, "-c", code])
        uid = sandbox.uid
        assert "parent done" in result.stdout
        assert processes_of(uid) == [], "the daemon is gone as soon as the run returns"
    beats = (workspace / "beat").stat().st_size
    threading.Event().wait(0.3)
    assert (workspace / "beat").stat().st_size == beats


def test_the_wall_clock_limit_kills_the_whole_tree(workspace: Path) -> None:
    with bwrap_sandbox(workspace, limits={"wall_s": 60}) as sandbox:
        result = sandbox.run(["sh", "-c", "sleep 300 & sleep 300 & sleep 300"], timeout_s=1)
        assert result.timed_out and result.exit_code < 0
        assert processes_of(sandbox.uid) == []
