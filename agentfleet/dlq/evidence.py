"""Collecting a failed item's artifacts from its workspace, under caps, without leaving it.

``collect_artifacts(workspace, patterns, caps)`` walks the workspace without following any
symbolic link (``os.fwalk``), keeps the regular files whose path relative to it matches one of
``patterns``, and reads each through a chain of ``openat`` calls that refuse a symbolic link at
every step (``O_NOFOLLOW``), so a link to ``/etc/passwd``, or a directory swapped for a link
while the walk runs, is never read. A file with more than one hard link is skipped too (it may
be a name for a file outside the workspace). FIFOs, sockets and devices are skipped.

Patterns are globs relative to the workspace, as ``pathlib`` reads them: ``*`` and ``?``
stay inside one part of the path, ``[...]`` is a class, ``**`` is any number of directories
(``**/*.png`` is every PNG, ``*.png`` only those at the top).

Caps (``ArtifactCaps``, in bytes): each file is cut to ``file_bytes``, and all of them
together to ``total_bytes``, in the order of the patterns, then of the paths (the first
pattern's files are kept first); at most ``max_files`` files are kept, and at most
``max_walk`` entries of the workspace (files and directories) are looked at, at most
``MAX_DEPTH`` directories deep. A plain-text file (a log) keeps its last bytes, where a
failure usually is; any other file its first bytes. A file cut or left out is listed with
``truncated`` set (a left-out one with no bytes). Text files pass the redactor before they
are kept; in any other file the known secret values are overwritten with ``*`` (what an image
shows cannot be found).
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentfleet.config.artifacts import check_pattern
from agentfleet.dlq.artifacts import Artifact, artifact_name, content_type_of
from agentfleet.redaction import Redactor

__all__ = ["ArtifactCaps", "Collected", "check_pattern", "collect_artifacts", "pattern_regex"]

log = logging.getLogger("agentfleet.dlq.evidence")

_HEAD = 16
# How many directories deep the walk goes at most.
MAX_DEPTH = 32
# Read this much past a cut before redacting, so a secret across the cut is still found whole.
_MARGIN = 512
_TEXT = ("text/", "application/json", "application/xml")


@dataclass(frozen=True)
class ArtifactCaps:
    """Bytes kept per file and per entry, files kept per entry, workspace entries looked at."""

    file_bytes: int = 1024 * 1024
    total_bytes: int = 4 * 1024 * 1024
    max_files: int = 20
    max_walk: int = 10_000


@dataclass
class Collected:
    """What was kept: ``artifacts`` (in order) and their bytes by name; ``skipped`` says what
    was passed over and why (for the log)."""

    artifacts: list[Artifact] = field(default_factory=list)
    data: dict[str, bytes] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


def _segment(part: str) -> str:
    out, i = [], 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and "]" in part[i + 2 :]:
            end = part.index("]", i + 2)
            body = part[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\").replace("/", "") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def pattern_regex(pattern: str) -> re.Pattern[str]:
    """The regular expression of glob ``pattern`` over ``/``-separated relative paths."""
    parts = [p for p in check_pattern(pattern).split("/") if p not in ("", ".")]
    body = ""
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            body += ".*" if last else "(?:[^/]+/)*"
        else:
            body += _segment(part) + ("" if last else "/")
    return re.compile(body, re.DOTALL)


def _candidates(
    root: Path, regexes: Sequence[re.Pattern[str]], caps: ArtifactCaps, skipped: list[str]
) -> Iterator[tuple[int, str]]:
    """(pattern index, relative path) of each regular file that matches, in walk order."""
    seen = 0
    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        here = os.path.relpath(dirpath, root)
        if here.count("/") + 1 >= MAX_DEPTH:
            # Deeper is no place for evidence, and the walk recurses.
            skipped.append(f"{here}: deeper than {MAX_DEPTH} directories, not looked into")
            dirnames.clear()
        dirnames.sort()
        stop = f"the walk stopped after {caps.max_walk} entries of the workspace"
        seen += len(dirnames)
        if seen > caps.max_walk:
            skipped.append(stop)
            return
        for name in sorted(filenames):
            seen += 1
            if seen > caps.max_walk:
                skipped.append(stop)
                return
            rel = name if here == "." else f"{here}/{name}"
            matched = next((i for i, rx in enumerate(regexes) if rx.fullmatch(rel)), None)
            if matched is None:
                continue
            try:
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append(f"{rel}: not a regular file")
            elif st.st_nlink > 1:
                skipped.append(f"{rel}: it has {st.st_nlink} hard links")
            else:
                yield matched, rel


def _open_beneath(root_fd: int, rel: str) -> int:
    """A read-only descriptor of ``rel`` under ``root_fd``, refusing a link at every step."""
    parts = rel.split("/")
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        return os.open(parts[-1], flags, dir_fd=fd)
    finally:
        os.close(fd)


def _read(fd: int, size: int, keep: int, tail: bool) -> tuple[bytes, bytes]:
    """The file's first bytes and the ``keep`` bytes kept (its last ones when ``tail``)."""
    head = os.pread(fd, _HEAD, 0)
    start = max(0, size - keep) if tail else 0
    chunks, want, at = [], keep, start
    while want > 0:
        chunk = os.pread(fd, min(want, 1 << 20), at)
        if not chunk:
            break
        chunks.append(chunk)
        want -= len(chunk)
        at += len(chunk)
    return head, b"".join(chunks)


def _redacted(data: bytes, redactor: Redactor, keep: int, tail: bool) -> bytes:
    text = data.decode("utf-8", "surrogateescape")
    return _cut(redactor.text(text).encode("utf-8", "surrogateescape"), keep, tail)


def _masked(data: bytes, redactor: Redactor) -> bytes:
    """``data`` (not text) with each known secret value overwritten by as many ``*``: its
    length and layout stay, so a file format is harmed no more than the secret's bytes."""
    for value in redactor.values:
        raw = value.encode()
        if raw in data:
            data = data.replace(raw, b"*" * len(raw))
    return data


def _cut(data: bytes, keep: int, tail: bool) -> bytes:
    """``keep`` bytes of ``data``: its last ones when ``tail``, else its first."""
    if keep <= 0:
        return b""
    return data[-keep:] if tail else data[:keep]


def _keep_one(
    root_fd: int, rel: str, room: int, caps: ArtifactCaps, redactor: Redactor | None
) -> tuple[Artifact, bytes] | None:
    """The artifact of the file at ``rel`` and its bytes, at most ``room``; None when it
    cannot be opened safely (a link, gone, no longer a regular file)."""
    name = artifact_name(rel)
    try:
        fd = _open_beneath(root_fd, rel)
    except OSError as exc:
        log.info("artifact %s not kept: %s", name, exc.strerror or exc)
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            return None
        size = st.st_size
        keep = min(size, caps.file_bytes, room)
        type_guess = content_type_of(name, os.pread(fd, _HEAD, 0))
        tail = type_guess == "text/plain"
        text = redactor is not None and type_guess.startswith(_TEXT)
        read = min(size, keep + _MARGIN) if text else keep
        head, data = _read(fd, size, read, tail)
    finally:
        os.close(fd)
    if text and redactor is not None:
        data = _redacted(data, redactor, keep, tail)
    elif redactor is not None:
        data = _masked(data, redactor)
    data = _cut(data, keep, tail)
    artifact = Artifact(
        name=name,
        size_bytes=len(data),
        content_type=content_type_of(name, head),
        truncated=len(data) < size,
        original_bytes=size,
    )
    return artifact, data


def collect_artifacts(
    workspace: str | os.PathLike[str],
    patterns: Sequence[str],
    caps: ArtifactCaps,
    *,
    redactor: Redactor | None = None,
) -> Collected:
    """The files of ``workspace`` matching ``patterns``, kept under ``caps`` (module docs)."""
    found = Collected()
    root = Path(workspace)
    if not patterns or not root.is_dir() or root.is_symlink():
        return found
    regexes = [pattern_regex(p) for p in patterns]
    ordered = sorted(_candidates(root, regexes, caps, found.skipped))
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        room = caps.total_bytes
        for _, rel in ordered:
            if len(found.artifacts) >= caps.max_files:
                found.skipped.append(f"{len(ordered) - caps.max_files} more files over max_files")
                break
            kept = _keep_one(root_fd, rel, room, caps, redactor)
            if kept is None:
                continue
            artifact, data = kept
            if artifact.name in found.data:
                artifact = artifact.model_copy(update={"name": _unique(artifact.name, found.data)})
            found.artifacts.append(artifact)
            found.data[artifact.name] = data
            room -= len(data)
    finally:
        os.close(root_fd)
    return found


def _unique(name: str, taken: dict[str, bytes]) -> str:
    """``name`` with ``~2``, ``~3``... before its extension, the first one not ``taken``."""
    stem, dot, ext = name.rpartition(".")
    if not dot or "/" in ext:
        stem, ext, dot = name, "", ""
    n = 2
    while f"{stem}~{n}{dot}{ext}" in taken:
        n += 1
    return f"{stem}~{n}{dot}{ext}"
