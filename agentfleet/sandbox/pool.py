"""A worker process's sandboxes: made per item, or taken from a warm pool and reset after use.

``SandboxPool.acquire(spec)`` returns a ``Lease``: the item's ``Sandbox`` over a workspace
made from the spec's template (``Lease.connect`` starts its egress proxy). ``Lease.release()``
stops its egress, kills what is left in it and either resets it into the warm pool or
destroys it.

The warm pool holds ``[sandbox] warm`` sandboxes, made in advance from the settings' own
template and backend, so an item whose resolved spec has that template and backend starts
without waiting for a copy or a checkout; the item's own limits apply from its first run.
They are handed to items and come back after use, reset (``Workspace.reset``); while more
items run at once than the pool holds, the others get sandboxes made for them, destroyed
after use. A sandbox that cannot be reset is destroyed and replaced in the background. A
prefork pool process fills its pool when it starts; other workers at their first sandboxed
item.

A worker killed mid-item (SIGKILL) leaves nothing running (``bwrap --die-with-parent``), and
its host users are free again once it is gone (their locks go with it); the workspaces it left
are removed by the next pool made on the host (``workspace.sweep_abandoned``), and so are
its cgroups (``cgroups.sweep_abandoned_cgroups``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfleet.sandbox.backend import Backend, Sandbox
from agentfleet.sandbox.cgroups import find_cgroups, sweep_abandoned_cgroups
from agentfleet.sandbox.network import NetworkPlan, plan_network
from agentfleet.sandbox.spec import SandboxSpec, resolve_spec
from agentfleet.sandbox.workspace import Workspace, sweep_abandoned

__all__ = ["Lease", "SandboxPool", "make_backend"]

log = logging.getLogger("agentfleet.sandbox")

_Key = tuple[str, str | None]


def make_backend(name: str, max_output_bytes: int) -> Backend:
    """The backend named ``name`` (``bubblewrap`` or ``none``)."""
    if name == "none":
        from agentfleet.sandbox.plain import PlainBackend

        return PlainBackend(max_output_bytes)
    from agentfleet.sandbox.bubblewrap import BubblewrapBackend

    return BubblewrapBackend(max_output_bytes)


@dataclass
class _Ready:
    key: _Key
    workspace: Workspace
    sandbox: Sandbox

    def destroy(self) -> None:
        try:
            self.sandbox.close()
        finally:
            self.workspace.remove()


class Lease:
    """One item's sandbox, held while its body runs (a ``Held`` of the delivery)."""

    def __init__(self, sandbox: Sandbox, ready: _Ready, spec: SandboxSpec, pool: SandboxPool) -> None:
        self.sandbox = sandbox
        self.ready = ready
        self.spec = spec
        self.pool = pool
        self.network: NetworkPlan | None = None
        self._lock = threading.Lock()
        self._wired = False

    def connect(self, make_proxy: Callable[[Path], Any]) -> None:
        """Start the item's egress proxy (``network.plan_network``) the first time it is asked
        for, when the spec declares destinations; the sandbox's programs then reach them."""
        with self._lock:
            if self._wired:
                return
            uid = getattr(self.sandbox, "uid", os.geteuid())
            self.network = plan_network(self.spec, uid=uid, make_proxy=make_proxy)
            self._wired = True
            if self.network is not None:
                self.sandbox.configure(
                    self.spec,
                    binds=self.ready.workspace.binds() + self.network.binds,
                    env=self.network.env,
                    wrap=self.network.wrap,
                )

    def release(self) -> None:
        self.pool.give_back(self)


class SandboxPool:
    """The sandboxes of one worker process (see the module docstring); ``settings`` are its
    ``Settings``."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self._backends: dict[str, Backend] = {}
        self._warm: list[_Ready] = []
        # Sandboxes of the warm pool's kind handed out, which come back to it.
        self._out = 0
        self._filling = False
        self._lock = threading.Lock()
        self._closed = False
        if os.geteuid() == 0:
            swept = sweep_abandoned(settings.workdir_root)
            if swept:
                log.info("removed %d sandbox workspaces a dead worker left", swept)
            host = find_cgroups()[0]
            swept = sweep_abandoned_cgroups(host) if host is not None else 0
            if swept:
                log.info("removed %d sandbox cgroups a dead worker left", swept)

    @property
    def warm_key(self) -> _Key:
        return (self.settings.sandbox.backend, self.settings.sandbox.template)

    def backend(self, name: str) -> Backend:
        with self._lock:
            found = self._backends.get(name)
            if found is None:
                found = self._backends[name] = make_backend(name, self.settings.sandbox.max_output_bytes)
            return found

    def _make(self, key: _Key, spec: SandboxSpec) -> _Ready:
        workspace = Workspace(key[1], self.settings.workdir_root)
        try:
            sandbox = self.backend(key[0]).prepare(workspace.path, spec)
        except BaseException:
            workspace.remove()
            raise
        return _Ready(key, workspace, sandbox)

    def acquire(self, spec: SandboxSpec) -> Lease:
        """A sandbox for one item (``spec`` resolved); its network is connected later, by
        ``Lease.connect``, once the item's execution is there to wire the proxy to."""
        assert spec.backend is not None
        key: _Key = (spec.backend, spec.template)
        ready = self._take_warm(key)
        if ready is None:
            ready = self._make(key, spec)
        if key == self.warm_key:
            with self._lock:
                self._out += 1
        self.fill_in_background()
        try:
            ready.sandbox.configure(spec, binds=ready.workspace.binds())
        except BaseException:
            self._forget(ready)
            ready.destroy()
            raise
        return Lease(ready.sandbox, ready, spec, self)

    def _take_warm(self, key: _Key) -> _Ready | None:
        with self._lock:
            for i, ready in enumerate(self._warm):
                if ready.key == key:
                    return self._warm.pop(i)
        return None

    def _forget(self, ready: _Ready) -> None:
        if ready.key == self.warm_key:
            with self._lock:
                self._out -= 1

    def give_back(self, lease: Lease) -> None:
        """End an item's use of its sandbox: stop its egress, kill what is left, and keep it
        warm (reset) or destroy it."""
        ready = lease.ready
        try:
            if lease.network is not None:
                lease.network.close()
        finally:
            ready.sandbox.reap()
            self._forget(ready)
            if not self._keep(ready):
                ready.destroy()

    def _keep(self, ready: _Ready) -> bool:
        with self._lock:
            wanted = not self._closed and ready.key == self.warm_key
            wanted = wanted and len(self._warm) + self._out < self.settings.sandbox.warm
        if not wanted:
            return False
        try:
            ready.workspace.reset()
            own = getattr(ready.sandbox, "own_workspace", None)
            if own is not None:
                own()
        except Exception:
            log.warning("could not reset a sandbox's workspace; it is destroyed", exc_info=True)
            return False
        with self._lock:
            if self._closed:
                return False
            self._warm.append(ready)
        return True

    def fill(self) -> None:
        """Make warm sandboxes until the pool holds ``[sandbox] warm`` of them."""
        spec = resolve_spec(SandboxSpec(), self.settings.sandbox)
        key = self.warm_key
        while True:
            with self._lock:
                if self._closed or len(self._warm) + self._out >= self.settings.sandbox.warm:
                    return
            ready = self._make(key, spec)
            with self._lock:
                if not self._closed:
                    self._warm.append(ready)
                    continue
            ready.destroy()
            return

    def fill_in_background(self) -> None:
        """``fill`` in a thread of its own (one at a time), logging what goes wrong."""
        with self._lock:
            short = len(self._warm) + self._out < self.settings.sandbox.warm
            if self._filling or self._closed or not short:
                return
            self._filling = True
        threading.Thread(target=self._fill_logged, name="agentfleet-sandbox-warm", daemon=True).start()

    def _fill_logged(self) -> None:
        try:
            self.fill()
        except Exception:
            log.warning("could not prepare a warm sandbox", exc_info=True)
        finally:
            with self._lock:
                self._filling = False

    def warm_count(self) -> int:
        """How many warm sandboxes are ready now."""
        with self._lock:
            return len(self._warm)

    def close(self) -> None:
        """Destroy every warm sandbox; the pool makes no more."""
        with self._lock:
            self._closed = True
            warm, self._warm = self._warm, []
        for ready in warm:
            ready.destroy()
