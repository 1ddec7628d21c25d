"""Dependencies that say the truth: an import nothing declares fails `make lint`, and the floor
check of `make test-floors` names a requirement installed above the floor it declares."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
DEPTRY = Path(sys.executable).parent / "deptry"


def _deptry_on(tmp_path: Path, module_text: str) -> subprocess.CompletedProcess[str]:
    """`deptry agentfleet` with this repository's pyproject.toml, on a package of one module (that
    leaves most requirements unused: DEP002 is not asked for)."""
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "agentfleet").mkdir()
    (tmp_path / "agentfleet" / "__init__.py").write_text(module_text)
    return subprocess.run(
        [str(DEPTRY), "--no-ansi", "--ignore", "DEP002", "agentfleet"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _check_floors() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_floors", REPO / ".ci" / "check_floors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_imports_only_what_it_declares() -> None:
    out = subprocess.run(
        [str(DEPTRY), "--no-ansi", "agentfleet"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_an_import_only_another_package_brings_in_fails(tmp_path: Path) -> None:
    # vine arrives with kombu and Celery, and agentfleet does not declare it.
    out = _deptry_on(tmp_path, "import kombu\nimport vine\n")
    assert out.returncode == 1
    assert "DEP003 'vine' imported but it is a transitive dependency" in out.stderr
    assert "'kombu'" not in out.stderr


def test_a_dev_tool_imported_by_the_package_fails(tmp_path: Path) -> None:
    out = _deptry_on(tmp_path, "import yaml\n")
    assert out.returncode == 1
    assert "DEP004 'yaml' imported but declared as a dev dependency" in out.stderr


@pytest.mark.parametrize("name", ["redis", "kombu", "celery"])
def test_a_floor_below_the_installed_version_is_named(name: str) -> None:
    floors = _check_floors()
    installed = version(name)
    assert floors.untrue_floors([f"{name}>={installed}"]) == []
    problems = floors.untrue_floors([f"{name}>=1.0,<999"])
    assert problems == [f"{name}: declares >=1.0 but the lowest that installs is {installed}"]


def test_a_requirement_without_a_floor_is_named() -> None:
    problems = _check_floors().untrue_floors(["redis"])
    assert problems == [f"redis: no floor declared (installed {version('redis')})"]
