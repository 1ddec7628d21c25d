"""The test trees of kombu and Celery at exactly the versions installed beside agentfleet.

The sdists are fetched once with ``pip download --no-binary :all: --no-deps`` into
``<cache>/sdists`` and kept. Each run gets its own copy of the sdist's tests and pytest
configuration only (``t/`` and ``setup.cfg``/``pyproject.toml``), never the library's source
package: the tests import the installed kombu and Celery, the ones agentfleet runs on.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

# The distributions whose versions must match between the project's venv and this one.
PINNED = ("celery", "kombu", "redis")
# What a run copies out of an sdist: the tests and the file holding their pytest configuration.
_KEEP_FILES = {"setup.cfg", "pyproject.toml"}
_KEEP_DIR = "t/"


class SourceError(RuntimeError):
    """The sdists cannot be fetched or the installed versions are not the project's."""


def installed_version(dist: str) -> str:
    """The version of ``dist`` installed in the interpreter running this script."""
    return metadata.version(dist)


def versions_of(python: Path) -> dict[str, str]:
    """The versions of ``PINNED`` installed for the interpreter at ``python``."""
    code = "import sys\nfrom importlib import metadata\nfor d in sys.argv[1:]: print(d, metadata.version(d))"
    out = subprocess.run(
        [str(python), "-c", code, *PINNED], check=True, capture_output=True, text=True
    ).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def check_same_versions(reference_python: Path) -> dict[str, str]:
    """The pinned versions, after checking that this interpreter has the same ones as the
    project's (``reference_python``); raises ``SourceError`` naming every mismatch."""
    ours = {dist: installed_version(dist) for dist in PINNED}
    if not reference_python.exists():
        raise SourceError(
            f"{reference_python} not found: build the project's venv first (make .venv/.installed)"
        )
    theirs = versions_of(reference_python)
    wrong = [f"{d} {ours[d]} here, {theirs[d]} in {reference_python}" for d in PINNED if ours[d] != theirs[d]]
    if wrong:
        raise SourceError("the upstream venv does not match the project's: " + "; ".join(wrong))
    return ours


def sdist(cache: Path, dist: str, version: str) -> Path:
    """The sdist of ``dist==version`` under ``cache/sdists``, downloaded if not there yet."""
    folder = cache / "sdists"
    found = sorted(folder.glob(f"{dist}-{version}.tar.gz"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-binary",
        ":all:",
        "--no-deps",
        "--dest",
        str(folder),
        f"{dist}=={version}",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted(folder.glob(f"{dist}-{version}.tar.gz"))
    if done.returncode != 0 or not found:
        raise SourceError(f"pip download {dist}=={version} failed: {done.stderr.strip()[-500:]}")
    return found[0]


def unpack_tests(archive: Path, into: Path) -> Path:
    """A fresh copy of the sdist's ``t/`` and pytest configuration in ``into`` (emptied first)."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            _, _, inner = member.name.partition("/")
            if inner in _KEEP_FILES or inner.startswith(_KEEP_DIR):
                member.name = inner
                members.append(member)
        tar.extractall(into, members=members, filter="data")
    if not (into / "t").is_dir():
        raise SourceError(f"{archive.name} holds no t/ test tree")
    return into
