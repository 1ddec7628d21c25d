"""An item's network: loopback only, or the fleet's egress proxy for its declared destinations.

A sandbox has a network namespace of its own with loopback alone: nothing of the host's
network, DNS included, is reachable. When the task declares destinations (``network``), the
worker starts an egress proxy for the item (``agentfleet.sandbox.egress.EgressProxy``)
listening on a Unix socket in a directory of the item's own; that directory is bound
read-only into the sandbox at ``/run/agentfleet``, with a copy of the proxy's CA certificate
(public; its key stays in the worker) beside the socket, ``/run/agentfleet/egress-ca.pem``
inside (the sandbox's ``/etc`` is the host's, read-only, so nothing can be added there), and
every program is started behind a bridge
(``egress.bridge_argv``) that listens on ``127.0.0.1:PROXY_PORT`` inside and forwards to the
socket, with ``HTTP_PROXY``/``HTTPS_PROXY`` and the CA variables (``egress.proxy_env``) set.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentfleet.sandbox.spec import SandboxSpec

__all__ = ["CA_INSIDE", "PROXY_PORT", "SOCKET_DIR_INSIDE", "NetworkPlan", "plan_network"]

PROXY_PORT = 3128
SOCKET_DIR_INSIDE = "/run/agentfleet"
CA_INSIDE = f"{SOCKET_DIR_INSIDE}/egress-ca.pem"
_SOCKET_NAME = "egress.sock"


class NetworkPlan:
    """What a sandbox needs for its egress: ``binds``, ``env``, ``wrap`` (see the module)."""

    def __init__(self, proxy: Any, egress: Any, socket_dir: Path) -> None:
        self._proxy = proxy
        self._socket_dir = socket_dir
        self.binds: list[tuple[str, str]] = [(str(socket_dir), SOCKET_DIR_INSIDE)]
        self.env: dict[str, str] = dict(egress.proxy_env(PROXY_PORT, CA_INSIDE))
        socket_inside = f"{SOCKET_DIR_INSIDE}/{_SOCKET_NAME}"
        self.wrap: Callable[[list[str]], list[str]] = lambda argv: list(
            egress.bridge_argv(socket_inside, PROXY_PORT, argv)
        )

    def close(self) -> None:
        """Stop the proxy and remove its socket's directory."""
        try:
            self._proxy.stop()
        finally:
            shutil.rmtree(self._socket_dir, ignore_errors=True)


def plan_network(spec: SandboxSpec, *, uid: int, make_proxy: Callable[[Path], Any]) -> NetworkPlan | None:
    """Start the egress proxy of one item whose ``spec`` declares destinations (None when it
    declares none): ``make_proxy(socket_path)`` makes it (not started; the worker's side,
    ``agentfleet.tasks.egress.egress_proxy``, wires it to the item's execution); ``uid`` is the
    sandbox's host user, to whom the socket is given."""
    if not spec.network:
        return None
    egress = importlib.import_module("agentfleet.sandbox.egress")
    socket_dir = Path(tempfile.mkdtemp(prefix="afsbx-net-"))
    os.chmod(socket_dir, 0o755)
    proxy = make_proxy(socket_dir / _SOCKET_NAME)
    try:
        shutil.copyfile(proxy.ca_cert_path, socket_dir / "egress-ca.pem")
        os.chmod(socket_dir / "egress-ca.pem", 0o644)
        proxy.start()
        with contextlib.suppress(FileNotFoundError, PermissionError):
            os.chown(socket_dir / _SOCKET_NAME, uid, uid)
    except BaseException:
        with contextlib.suppress(Exception):
            proxy.stop()
        shutil.rmtree(socket_dir, ignore_errors=True)
        raise
    return NetworkPlan(proxy, egress, socket_dir)
