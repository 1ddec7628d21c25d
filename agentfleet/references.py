"""Functions named by ``module:qualname``, so a worker in another process can import them.

``Fleet.map(aggregate=...)`` takes a function or its name; either is turned into the name
(``callable_path``) and imported there and then (``resolve_callable``), so an aggregate that a
worker could not import fails at dispatch with ``DispatchError``, before any item runs. What
it names must be a plain function (``def``, at the top level of that module): a class, a
builtin such as ``sys.exit`` or a name imported from elsewhere is refused.

Reading a name (``split_path``, ``canonical_path``) imports nothing: ``agentfleet.callables``
decides on the name alone whether a name from outside may be imported at all.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from agentfleet.errors import DispatchError

__all__ = ["callable_path", "canonical_path", "defined_function", "resolve_callable", "split_path"]


def split_path(path: str) -> tuple[str, str]:
    """``(module, qualname)`` of ``module:qualname`` (or ``module.name``), without importing.

    Raises ``DispatchError`` when it is not of that shape.
    """
    module_name, _, qualname = path.partition(":")
    if not qualname:
        module_name, _, qualname = path.rpartition(".")
    if not module_name or not qualname or not path.isprintable() or " " in path:
        raise DispatchError(f"{path!r} is not a function name; write it as module:function")
    return module_name, qualname


def canonical_path(path: str) -> str:
    """``path`` written as ``module:qualname`` (``a.b.c`` is function ``c`` of module ``a.b``)."""
    module_name, qualname = split_path(path)
    return f"{module_name}:{qualname}"


def defined_function(target: Any, module: str, qualname: str) -> bool:
    """True when ``target`` is a function written with ``def`` at ``module:qualname`` itself
    (not a builtin, a class, a lambda, nor a name imported into that module)."""
    return (
        inspect.isfunction(target)
        and target.__module__ == module
        and target.__qualname__ == qualname
        and "<" not in qualname
    )


def resolve_callable(path: str) -> Callable[..., Any]:
    """Import ``module:qualname`` (or ``module.name``) and return the callable it names.

    Raises ``DispatchError`` naming the path when the module does not import, the name is not
    in it, or what it names cannot be called.
    """
    module_name, qualname = split_path(path)
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
    """The ``module:qualname`` of ``fn`` (or ``fn`` itself, if a name), checked to import and
    to be a plain function defined where it is named.

    A lambda, a nested function or one defined in ``__main__`` has no name another process
    can import; a builtin or a class is not an aggregate: ``DispatchError``.
    """
    if isinstance(fn, str):
        path = canonical_path(fn)
    else:
        module = getattr(fn, "__module__", None)
        qualname = getattr(fn, "__qualname__", "")
        if not module or module == "__main__" or "<" in qualname:
            raise DispatchError(
                f"{fn!r} must be a module-level function in an importable module (workers import it by name)"
            )
        path = f"{module}:{qualname}"
    target = resolve_callable(path)
    if not defined_function(target, *split_path(path)):
        raise DispatchError(
            f"{path!r} is not a function defined with def at the top level of its module "
            "(a builtin, a class or a name imported from elsewhere cannot be an aggregate)"
        )
    return fn if isinstance(fn, str) else path
