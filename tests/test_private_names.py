"""Library-private names (kombu, redis-py, Celery, ...) are used only in ``agentfleet.transport``,
and every one used there is listed, with its check, in ``agentfleet.transport.internals``.

A private name is found in four ways, by reading the package's source:

- an attribute of a class agentfleet extends, used or overridden by agentfleet's code of that
  class (``self._deliver(...)``, ``def _maybe_scale``), whatever the library;
- an underscored attribute read or set on any other object that agentfleet itself never defines
  (``channel._q_for_pri``, ``message._raw``), or named by ``getattr``/``hasattr``/``setattr``;
- an underscored name imported from another distribution (``from celery.canvas import _chain``);
- an attribute set on another distribution's module (``trace.saferepr = ...``), an object's
  class swapped (``x.__class__ = ...``), a decorated function unwrapped (``__wrapped__``).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import agentfleet
from agentfleet.transport import internals

ROOT = Path(agentfleet.__file__).parent
OWNER = "agentfleet/transport/"
_SPECIAL = {"__class__", "__wrapped__"}
# The public methods of named tuples (``urlsplit(...)._replace``), underscored to avoid field names.
_NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
_NAME_CALLS = {"getattr", "hasattr", "setattr", "delattr"}


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    name: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name}"


def _private(name: str) -> bool:
    dunder = name.startswith("__") and name.endswith("__")
    return name.startswith("_") and not dunder and name not in _NAMEDTUPLE_API


def _modules() -> Iterator[tuple[str, Path]]:
    for info in pkgutil.walk_packages(agentfleet.__path__, "agentfleet."):
        if info.name.endswith("__main__"):
            continue  # runs the command line when imported
        module = importlib.import_module(info.name)
        if module.__file__ and module.__file__.endswith(".py"):
            yield info.name, Path(module.__file__)


def _relative(path: Path) -> str:
    return str(Path("agentfleet") / path.relative_to(ROOT))


def _own_class(cls: type) -> bool:
    return cls.__module__.startswith("agentfleet.") or cls.__module__ == "agentfleet"


def _library_attributes(cls: type) -> set[str]:
    """Every attribute that a non-agentfleet class in ``cls``'s MRO defines or sets on its
    instances (any attribute its methods name), ``object`` left out."""
    names: set[str] = set()
    for base in cls.__mro__:
        if _own_class(base) or base is object or base.__module__ == "builtins":
            continue
        for name, value in vars(base).items():
            names.add(name)
            code = getattr(inspect.unwrap(value), "__code__", None) if callable(value) else None
            if code is not None:
                names.update(code.co_names)
    return names


def _self_names(node: ast.AST) -> Iterator[tuple[int, str]]:
    """``self.x``/``cls.x`` attributes and getattr-style names on ``self`` within ``node``."""
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and sub.value.id in ("self", "cls")
        ):
            yield sub.lineno, sub.attr
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Name)
            and sub.func.id in _NAME_CALLS
            and len(sub.args) >= 2
            and isinstance(sub.args[0], ast.Name)
            and sub.args[0].id == "self"
            and isinstance(sub.args[1], ast.Constant)
            and isinstance(sub.args[1].value, str)
        ):
            yield sub.lineno, sub.args[1].value


def _class_nodes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}


def _inherited_uses(trees: dict[str, tuple[Path, ast.Module]]) -> tuple[set[Use], set[str]]:
    """Library attributes that agentfleet classes use through ``self`` or override, and the names
    so overridden (they are the library's, not agentfleet's own)."""
    uses: set[Use] = set()
    overridden: set[str] = set()
    for name in trees:
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != name:
                continue
            library = _library_attributes(cls)
            if not library:
                continue
            for part in cls.__mro__:
                if not _own_class(part):
                    continue
                part_path, part_tree = trees[part.__module__]
                node = _class_nodes(part_tree).get(part.__name__)
                if node is None:
                    continue
                for item in node.body:
                    is_method = isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    if is_method and item.name in library and _private(item.name):
                        uses.add(Use(_relative(part_path), item.lineno, item.name))
                        overridden.add(item.name)
                for line, attr in _self_names(node):
                    if attr in library and _private(attr):
                        uses.add(Use(_relative(part_path), line, attr))
                        overridden.add(attr)
    return uses, overridden


def _own_names(trees: dict[str, tuple[Path, ast.Module]]) -> set[str]:
    """Underscored names agentfleet defines itself: functions, classes, assignments, and
    attributes set on ``self``."""
    names: set[str] = set()
    for _, tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return {name for name in names if _private(name)}


def _foreign_modules(tree: ast.Module) -> set[str]:
    """Names bound in ``tree`` to another distribution's module (``from celery.app import trace``)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("agentfleet"):
                    bound.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("agentfleet"):
            for alias in node.names:
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    continue
                bound.add(alias.asname or alias.name)
    return bound


def _attribute_is_private(node: ast.Attribute, own: set[str], modules: set[str]) -> bool:
    owner = node.value.id if isinstance(node.value, ast.Name) else None
    stored = isinstance(node.ctx, ast.Store)
    if node.attr in _SPECIAL:
        return node.attr == "__wrapped__" or stored
    if _private(node.attr) and owner not in ("self", "cls") and node.attr not in own:
        return True
    return stored and owner in modules  # a module of another distribution changed


def _direct_uses(trees: dict[str, tuple[Path, ast.Module]], own: set[str]) -> set[Use]:
    uses: set[Use] = set()
    for path, tree in trees.values():
        where = _relative(path)
        modules = _foreign_modules(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("agentfleet"):
                uses.update(Use(where, node.lineno, a.name) for a in node.names if _private(a.name))
            elif isinstance(node, ast.Attribute) and _attribute_is_private(node, own, modules):
                uses.add(Use(where, node.lineno, node.attr))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in _NAME_CALLS
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and _private(node.args[1].value)
                and node.args[1].value not in own
            ):
                uses.add(Use(where, node.lineno, node.args[1].value))
    return uses


def private_uses() -> set[Use]:
    """Every use of a library-private name in the package."""
    trees = {name: (path, ast.parse(path.read_text(), str(path))) for name, path in _modules()}
    inherited, overridden = _inherited_uses(trees)
    own = _own_names(trees) - overridden
    return inherited | _direct_uses(trees, own)


def test_library_private_names_are_used_only_in_the_transport_package() -> None:
    outside = sorted(str(use) for use in private_uses() if not use.path.startswith(OWNER))
    assert outside == []


def test_every_private_name_the_transport_package_uses_is_listed_and_checked() -> None:
    used = {use.name for use in private_uses()} - _SPECIAL
    listed = {need.name for need in internals.NEEDS}
    assert used - listed == set(), "add each to internals.NEEDS with the feature that needs it"
    assert {name for name in listed if _private(name)} - used == set(), "listed but no longer used"


def test_the_scan_finds_each_kind_of_private_use(tmp_path: Path) -> None:
    # The scanner itself: a module of each kind is found (a check that cannot fail is no check).
    source = (
        "from celery.canvas import _chain\n"
        "from celery.app import trace\n"
        "trace.saferepr = repr\n"
        "def f(channel, pool):\n"
        "    pool.__class__ = dict\n"
        "    return channel._q_for_pri('q', 0), getattr(channel, '_brpop_read')\n"
    )
    tree = ast.parse(source)
    path = ROOT / "example.py"
    found = {(u.line, u.name) for u in _direct_uses({"agentfleet.example": (path, tree)}, own=set())}
    assert found == {(1, "_chain"), (3, "saferepr"), (5, "__class__"), (6, "_q_for_pri"), (6, "_brpop_read")}
