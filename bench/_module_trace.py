"""Which agentfleet modules run Python code in this process, recorded while a window is open.

Imported by ``sitecustomize`` (``bench/item_modules.py`` writes one) in the client and in
every worker process, including prefork children (a fork hook starts the watcher again). A
profile hook on the main thread notes the module of every agentfleet function called; a
watcher thread polls the directory: when ``open-<window>`` appears it empties the record, when
``close-<window>`` appears it writes the modules seen since to ``seen-<window>-<pid>.txt``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

_PACKAGE = str(Path(__file__).resolve().parent.parent / "agentfleet") + os.sep
_seen: set[str] = set()


def _module_of(filename: str) -> str | None:
    if not filename.startswith(_PACKAGE):
        return None
    return "agentfleet/" + filename[len(_PACKAGE) :]


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call":
        module = _module_of(frame.f_code.co_filename)
        if module is not None:
            _seen.add(module)


def _watch(directory: Path) -> None:
    handled: set[str] = set()
    window: str | None = None
    while True:
        time.sleep(0.02)
        if window is None:
            for mark in directory.glob("open-*"):
                name = mark.name.removeprefix("open-")
                if name not in handled:
                    _seen.clear()
                    window = name
                    break
        elif (directory / f"close-{window}").exists():
            (directory / f"seen-{window}-{os.getpid()}.txt").write_text("\n".join(sorted(_seen)))
            handled.add(window)
            window = None


def seen() -> set[str]:
    """The modules recorded so far in this process."""
    return set(_seen)


def start() -> None:
    """Record in this process, and in each child it forks, when the trace directory is set."""
    directory = os.environ.get("AGENTFLEET_MODULE_TRACE")
    if not directory:
        return
    sys.setprofile(_profile)
    threading.Thread(target=_watch, args=(Path(directory),), daemon=True).start()


os.register_at_fork(after_in_child=start)
