"""The lanes a worker process learnt it has on runs' timelines, so its scripts skip the lookup.

A worker's lane in a run (``p:run:{<id>}:lanes``, see ``runs/spans.py``) is numbered the first
time the run records an attempt of that worker and never changes after. The scripts that add a
timeline entry return the lane they used; given it back, they write the entry without reading
the lanes hash (one command an outcome fewer). The cache holds the most recent ``size`` runs'
lanes; a run it forgot costs one lookup again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["LaneCache"]


class LaneCache:
    """(run id, worker node) -> lane number as text, for the ``size`` most recent runs; safe to
    share between a process's threads."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._lanes: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_id: str, node: str) -> str:
        """The lane ``node`` has in ``run_id``, '' when not known (or ``node`` is '')."""
        return self._lanes.get((run_id, node), "") if node else ""

    def note(self, run_id: str, node: str, lane: object) -> None:
        """Remember a lane a script returned ('', None or -1: none to remember); each outcome
        notes the lane it used, which keeps its run among the most recent."""
        if not node or lane is None:
            return
        text = lane.decode() if isinstance(lane, bytes) else str(lane)
        key = (run_id, node)
        if self._lanes.get(key) == text:
            try:  # noqa: SIM105 - every outcome comes here: suppress() would cost three calls
                self._lanes.move_to_end(key)
            except KeyError:
                pass  # another thread has just forgotten it
            return
        if text in ("", "-1"):
            return
        with self._lock:
            self._lanes[key] = text
            self._lanes.move_to_end(key)
            while len(self._lanes) > self.size:
                self._lanes.popitem(last=False)
