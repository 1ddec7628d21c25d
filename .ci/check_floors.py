"""Fail unless every requirement of pyproject.toml is installed at the floor it declares.

Run by ``make test-floors`` in the venv it builds with uv's lowest-direct resolution; the
extras named as arguments (``check_floors.py otel``) are checked too. A
requirement installed above its floor has a floor that cannot be installed (another
requirement raises it), so the floor it declares is not true: raise it to what was installed.
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def declared_floor(requirement: Requirement) -> Version | None:
    """The version after ``>=`` in ``requirement``, or None when it declares no floor."""
    floors = [Version(spec.version) for spec in requirement.specifier if spec.operator == ">="]
    return max(floors) if floors else None


def untrue_floors(requirements: list[str]) -> list[str]:
    """One line per requirement not installed at its declared floor (or declaring none)."""
    problems = []
    for line in requirements:
        requirement = Requirement(line)
        floor = declared_floor(requirement)
        installed = Version(version(requirement.name))
        if floor is None:
            problems.append(f"{requirement.name}: no floor declared (installed {installed})")
        elif installed != floor:
            problems.append(
                f"{requirement.name}: declares >={floor} but the lowest that installs is {installed}"
            )
    return problems


def requirements_of(project: dict, extras: list[str]) -> list[str]:
    """The project's requirements and those of ``extras`` (once each)."""
    optional = project.get("optional-dependencies", {})
    unknown = [name for name in extras if name not in optional]
    if unknown:
        raise SystemExit(f"no such extra in pyproject.toml: {', '.join(unknown)}")
    found = list(project["dependencies"])
    for name in extras:
        found += [line for line in optional[name] if line not in found]
    return found


def main() -> int:
    requirements = requirements_of(tomllib.loads(PYPROJECT.read_text())["project"], sys.argv[1:])
    problems = untrue_floors(requirements)
    for problem in problems:
        print(f"floor not true: {problem}", file=sys.stderr)
    if not problems:
        print(f"all {len(requirements)} floors of pyproject.toml are what installed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
