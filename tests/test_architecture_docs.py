"""The map stays true to the territory: docs/architecture.md's layer table is the import-linter
layers contract in pyproject.toml, row for row, and every file or module that the docs, the
README or a docstring or comment under agentfleet/ names exists.

A name counts as a path when it has a slash and ends in ``.py``, ``.lua`` or ``.md``
(``agentfleet/tasks/runtime.py``, ``tasks/runtime.py``, ``tests/test_x.py``), or when it is
dotted under the package (``agentfleet.tasks.runtime``, ``agentfleet.celery_app.app``)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "agentfleet"
ARCHITECTURE = REPO / "docs" / "architecture.md"
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SOURCES = sorted(PACKAGE.rglob("*.py"))

_SLASHED = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w-]+\.(?:py|lua|md))\b")
_DOTTED = re.compile(r"(?<![\w./-])(agentfleet(?:\.[A-Za-z_]\w*)+)")
# Dotted names that are files, not modules.
_FILES = re.compile(r"agentfleet\.(toml|yaml|yml|json|md)$")
# Files a reader makes (the docs' examples) and other projects' sources the docs cite.
_ELSEWHERE = ("myapp/", "t/integration/")
# A bare file name in the docs (a table of one package's modules) names a file of this
# repository, except these, which are other projects' files the docs compare with.
_BARE = re.compile(r"`([A-Za-z_][\w.-]*\.(?:py|lua))`")
_OTHER_PROJECTS = {
    "constants.py": "arq",
    "test_canvas.py": "Celery",
    "test_inspect.py": "Celery",
    "test_connection_recovery.py": "Celery",
}
_SEARCH_ROOTS = (REPO, PACKAGE)


# -- the layer table -------------------------------------------------------------------------


def _contract_layers() -> list[set[str]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    return [{name.strip() for name in layer.split("|")} for layer in layers["layers"]]


def _table_under(heading: str, text: str) -> list[list[str]]:
    """The first Markdown table after ``heading``: each body row's cells, unescaped."""
    section = text.split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(section) if line.startswith("|"))
    rows: list[list[str]] = []
    for line in section[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\) \| ", line.strip().strip("|").strip())
        rows.append([cell.replace("\\|", "|") for cell in cells])
    return rows


def _documented_layers() -> list[set[str]]:
    rows = _table_under("## The layers", ARCHITECTURE.read_text())
    layers = []
    for row in rows:
        names = re.findall(r"`([\w/.]+)`", row[0])
        layers.append({"agentfleet." + name.removesuffix("/").removesuffix(".py") for name in names})
    return layers


def test_the_architecture_table_is_the_layers_contract() -> None:
    assert _documented_layers() == _contract_layers()


def test_the_layers_contract_names_the_architecture_table() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    names = [c["name"] for c in config["tool"]["importlinter"]["contracts"]]
    assert any("architecture table" in name for name in names)
    assert "## The layers" in ARCHITECTURE.read_text()


def test_every_package_and_top_level_module_has_a_layer() -> None:
    layered = set().union(*_contract_layers())
    present = {
        "agentfleet." + (path.stem if path.is_file() else path.name)
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.stem not in ("__init__", "__main__"))
        or (path.is_dir() and (path / "__init__.py").is_file())
    }
    assert present - layered == set()
    assert layered - present == set()


# -- names of files and modules --------------------------------------------------------------


def _docstrings_and_comments(path: Path) -> Iterator[tuple[int, str]]:
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                yield first.lineno, first.value.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def _texts() -> Iterator[tuple[Path, int, str]]:
    for document in DOCUMENTS:
        for number, line in enumerate(document.read_text().splitlines(), start=1):
            yield document, number, line
    for source in SOURCES:
        for number, text in _docstrings_and_comments(source):
            yield source, number, text


@cache
def _repository_files() -> tuple[str, ...]:
    skip = (".venv", ".git", "build", "node_modules", ".mypy_cache", ".ruff_cache")
    return tuple(
        "/" + path.relative_to(REPO).as_posix()
        for path in REPO.rglob("*")
        if path.is_file() and not any(part in skip for part in path.relative_to(REPO).parts)
    )


def _file_exists(name: str, mentioned_in: Path) -> bool:
    """A slashed name is found beside the file that names it, above it, at the repository's
    root or the package's, or (a short name in a table of one package) as the tail of exactly
    one file of the repository."""
    name = name.removeprefix("./")
    roots = [*mentioned_in.parents, *_SEARCH_ROOTS]
    if any((root / name).is_file() for root in roots if REPO in (root, *root.parents)):
        return True
    tails = [path for path in _repository_files() if path.endswith("/" + name)]
    return len(tails) == 1


def _top_level_names(module: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def _module_exists(dotted: str) -> bool:
    """``agentfleet.a.b`` names a module or package, or a name defined at the top of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:cut])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if not module.is_file():
            continue
        rest = parts[cut:]
        if not rest:
            return True
        return rest[0] in _top_level_names(module) or (base / rest[0]).is_dir()
    return False


@cache
def _names_in_code() -> frozenset[str]:
    """Every string in the package's code that is a dotted name: task, queue, logger and span
    attribute names, which the docs may name as they name modules."""
    found: set[str] = set()
    for source in SOURCES:
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.update(re.findall(r"^agentfleet(?:\.\w+)+$", node.value))
    return frozenset(found)


def _missing_names() -> list[str]:
    missing = []
    for path, line, text in _texts():
        where = f"{path.relative_to(REPO)}:{line}"
        for name in _SLASHED.findall(text):
            if name.startswith(_ELSEWHERE) or re.search(r"://\S*" + re.escape(name), text):
                continue
            if not _file_exists(name, path):
                missing.append(f"{where}: {name}")
        if path.suffix == ".md":
            for bare in _BARE.findall(text):
                known = any(file.endswith("/" + bare) for file in _repository_files())
                if not known and bare not in _OTHER_PROJECTS:
                    missing.append(f"{where}: {bare}")
        for dotted in _DOTTED.findall(text):
            dotted = dotted.rstrip(".")
            if _FILES.match(dotted) or dotted in _names_in_code():
                continue
            if not _module_exists(dotted):
                missing.append(f"{where}: {dotted}")
    return missing


def test_every_file_and_module_the_docs_and_docstrings_name_exists() -> None:
    assert _missing_names() == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("see `agentfleet/tasks/runtime.py` and tasks/nothing_here.py", ["tasks/nothing_here.py"]),
        ("``agentfleet.tasks.runtime.WorkerRuntime`` and agentfleet.tasks.gone", ["agentfleet.tasks.gone"]),
        ("settings in agentfleet.toml, https://example.com/x/y.py", []),
        ("`leases.py` beside `vanished.py`", ["vanished.py"]),
        ("the task ``agentfleet.compensate``, the logger agentfleet.maintenance", []),
    ],
)
def test_the_scanner_tells_a_missing_name_from_a_present_one(
    text: str, found: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = REPO / "docs" / "architecture.md"
    monkeypatch.setattr("test_architecture_docs._texts", lambda: iter([(page, 1, text)]))
    assert [entry.split(": ", 1)[1] for entry in _missing_names()] == found
