"""An item's workspace: made empty or from a template, reset for the next item, removed.

A template is a directory or a git repository (a directory holding ``.git``):

- a directory is copied (symbolic links kept as links);
- a git repository is checked out per workspace as a shared clone of its ``HEAD`` (``git clone
  --shared``): a working tree of its own with a ``.git`` of its own (so ``git`` works inside
  the sandbox, commits included, and one item cannot touch another's refs or index), whose
  history is read from the template's object store (bound read-only into the sandbox at
  the same path, ``binds``) rather than copied. Files git ignores (installed dependencies
  such as ``node_modules`` or ``.venv``) are not checked out, so a template that needs them
  commits them or makes them in its first run.

``reset`` brings a used workspace back to its template (its first commit checked out again and ``git clean
-ffdx`` for a clone; emptied and copied again for a directory), ``remove`` deletes it (and
the clone is its own: nothing is left in the template).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from agentfleet.errors import ConfigError
from agentfleet.sandbox.uids import if_abandoned

__all__ = ["PREFIX", "Workspace", "sweep_abandoned"]

PREFIX = "afsbx-"

_GIT_TIMEOUT_S = 300.0


def _git(*args: str) -> str:
    # The worker's environment, but never a GIT_DIR or GIT_WORK_TREE that points elsewhere.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    cmd = ["git", "-c", "safe.directory=*", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=_GIT_TIMEOUT_S)
    if done.returncode != 0:
        raise ConfigError(f"sandbox template: git {' '.join(args)} failed: {done.stderr.strip()[:500]}")
    return done.stdout.strip()


def _clear(directory: Path) -> None:
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


class Workspace:
    """A workspace directory under ``root`` (None: the system's temporary directory), made from
    ``template`` (None: empty)."""

    def __init__(self, template: str | None, root: str | None) -> None:
        self.template = Path(template).resolve() if template else None
        if self.template is not None and not self.template.is_dir():
            raise ConfigError(
                f"sandbox template {template!r} is not a directory; set sandbox.template "
                "(AGENTFLEET_SANDBOX__TEMPLATE) or the task's SandboxSpec.template to a directory "
                "or a git repository"
            )
        self.is_git = self.template is not None and (self.template / ".git").is_dir()
        self._head = ""
        self.path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=root))
        os.chmod(self.path, 0o700)
        self._fill()

    def _fill(self) -> None:
        if self.template is None:
            return
        if self.is_git:
            _git("clone", "--shared", "--quiet", str(self.template), str(self.path))
            self._head = _git("-C", str(self.path), "rev-parse", "HEAD")
        else:
            shutil.copytree(self.template, self.path, symlinks=True, dirs_exist_ok=True)

    def reset(self) -> None:
        """Bring the workspace back to its template (empty without one)."""
        if self.is_git:
            _git("-C", str(self.path), "checkout", "-q", "--force", "--detach", self._head)
            _git("-C", str(self.path), "clean", "-ffdxq")
            return
        _clear(self.path)
        self._fill()

    def binds(self) -> list[tuple[str, str]]:
        """Read-only ``(host, inside)`` binds a sandbox over this workspace needs: the template
        repository's object store, at its own path, for a shared clone."""
        if self.is_git and self.template is not None:
            objects = str(self.template / ".git" / "objects")
            return [(objects, objects)]
        return []

    def remove(self) -> None:
        """Delete the workspace."""
        shutil.rmtree(self.path, ignore_errors=True)


def sweep_abandoned(root: str | None) -> int:
    """Remove the workspaces under ``root`` left by a worker that died (SIGKILL, a crash):
    owned by a sandbox user that no live process holds. How many were removed."""
    removed = 0
    base = Path(root or tempfile.gettempdir())
    for path in base.glob(f"{PREFIX}*"):
        try:
            owner = path.lstat().st_uid
        except FileNotFoundError:
            continue
        if not path.is_dir():
            continue
        with if_abandoned(owner) as abandoned:
            if abandoned:
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
    return removed
