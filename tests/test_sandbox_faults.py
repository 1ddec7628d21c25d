"""A worker SIGKILLed while its sandbox runs: nothing of the sandbox keeps running, its host
user is free again, and the next pool on the host removes the workspace it left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from fault_support import wait_until
from sandbox_support import wait_gone

from agentfleet.config import load_settings
from agentfleet.sandbox.pool import SandboxPool
from agentfleet.sandbox.uids import try_lease

WORKER = textwrap.dedent(
    """
    import sys
    from agentfleet.config import load_settings
    from agentfleet.sandbox.pool import SandboxPool
    from agentfleet.sandbox.spec import SandboxSpec, resolve_spec

    pool = SandboxPool(load_settings())
    lease = pool.acquire(resolve_spec(SandboxSpec(), pool.settings.sandbox))
    print(lease.sandbox.uid, lease.sandbox.workspace, flush=True)
    script = "(setsid sh -c 'while :; do date >> /workspace/beat; sleep 0.1; done' &); sleep 300"
    lease.sandbox.run(["sh", "-c", script])
    """
)


def test_a_sigkilled_worker_leaves_no_process_and_its_workspace_is_swept() -> None:
    worker = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout is not None
        uid_text, workspace_text = worker.stdout.readline().split()
        uid, workspace = int(uid_text), Path(workspace_text)
        wait_until(lambda: (workspace / "beat").exists(), 30, "the daemon's first beat")
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
    assert wait_gone(uid), "the daemon died with the worker"
    lease = try_lease(uid)
    assert lease is not None, "the host user is free again"
    lease.release()
    assert workspace.exists()
    pool = SandboxPool(load_settings())
    pool.close()
    assert not workspace.exists(), "the next pool removed the dead worker's workspace"
