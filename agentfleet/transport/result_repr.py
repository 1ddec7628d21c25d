"""A quick ``repr`` of a fleet item's outcome for Celery's success log line and event.

Celery's tracer writes ``saferepr(result, 1024)`` of every return value into the worker's
"succeeded" log line and the ``task-succeeded`` event Flower shows. ``saferepr`` is a
streaming repr written in Python, safe for any object: 40-80 microseconds for a fleet item's
outcome dict, about a twelfth of a no-op item's worker CPU (profiled). A fleet task returns
its outcome as an ``OutcomeDict``, JSON values only (``model_dump(mode="json")``), which
cannot recurse and whose ``repr`` runs no user code; for it the builtin ``repr`` gives the
same text, cut at the same length (and shows values nested deeper than ``saferepr``'s three
levels, where it writes ``[...]``). Every other return value goes to ``saferepr`` as before.
``install`` swaps the tracer's ``saferepr`` for ``quick_saferepr`` (once, in workers).
"""

from __future__ import annotations

from typing import Any

from celery.app import trace
from celery.utils.saferepr import saferepr

from agentfleet.transport.internals import enabled

__all__ = ["OutcomeDict", "install", "quick_saferepr"]


class OutcomeDict(dict[str, Any]):
    """A fleet item's outcome as its task returns it: a plain dict to every reader; its type
    marks it for the quick repr."""

    __slots__ = ()


def quick_saferepr(o: Any, maxlen: int | None = None, maxlevels: int = 3, seen: Any = None) -> str:
    """``saferepr``, through the builtin ``repr`` for an ``OutcomeDict``."""
    if type(o) is OutcomeDict:
        text = dict.__repr__(o)
        return text if maxlen is None or len(text) <= maxlen else text[:maxlen] + "..."
    return saferepr(o, maxlen, maxlevels, seen)


def install() -> bool:
    """Have Celery's tracer use ``quick_saferepr`` (safe to call again); False, and the tracer
    left as it is, when it no longer has the ``saferepr`` this replaces."""
    if not enabled("quick_result_repr"):
        return False
    trace.saferepr = quick_saferepr
    return True
