"""Functions named by ``module:qualname``, so a worker in another process can import them.

``Fleet.map(aggregate=...)`` takes a function or its name; either is turned into the name
(``callable_path``) and imported there and then (``resolve_callable``), so an aggregate that a
worker could not import fails at dispatch with ``DispatchError``, before any item runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from agentfleet.errors import DispatchError

__all__ = ["callable_path", "resolve_callable"]


def resolve_callable(path: str) -> Callable[..., Any]:
    """Import ``module:qualname`` (or ``module.name``) and return the callable it names.

    Raises ``DispatchError`` naming the path when the module does not import, the name is not
    in it, or what it names cannot be called.
    """
    module_name, _, qualname = path.partition(":")
    if not qualname:
        module_name, _, qualname = path.rpartition(".")
    if not module_name or not qualname:
        raise DispatchError(f"{path!r} is not a function name; write it as module:function")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise DispatchError(f"{path!r}: module {module_name!r} does not import ({exc})") from None
    for part in qualname.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise DispatchError(f"{path!r}: {module_name} has no {qualname}") from None
    if not callable(target):
        raise DispatchError(f"{path!r} names a {type(target).__name__}, not a function")
    return target


def callable_path(fn: Callable[..., Any] | str) -> str:
    """The ``module:qualname`` of ``fn`` (or ``fn`` itself, if a name), checked to import.

    A lambda, a nested function or one defined in ``__main__`` has no name another process
    can import: ``DispatchError``.
    """
    if isinstance(fn, str):
        resolve_callable(fn)
        return fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        raise DispatchError(
            f"{fn!r} must be a module-level function in an importable module (workers import it by name)"
        )
    path = f"{module}:{qualname}"
    resolve_callable(path)
    return path
