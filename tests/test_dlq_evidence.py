"""Collecting a failed item's artifacts: patterns, caps, names, and never leaving the workspace."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from agentfleet.config import Settings
from agentfleet.dlq.artifacts import artifact_name, content_type_of
from agentfleet.dlq.evidence import ArtifactCaps, collect_artifacts, pattern_regex
from agentfleet.redaction import Redactor

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
CAPS = ArtifactCaps(file_bytes=1000, total_bytes=5000, max_files=10)


def _write(root: Path, rel: str, data: bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_patterns_read_as_pathlib_globs() -> None:
    assert pattern_regex("*.png").fullmatch("shot.png")
    assert not pattern_regex("*.png").fullmatch("screens/shot.png")
    assert pattern_regex("**/*.png").fullmatch("shot.png")
    assert pattern_regex("**/*.png").fullmatch("a/b/shot.png")
    assert pattern_regex("reports/junit-?.xml").fullmatch("reports/junit-1.xml")
    assert pattern_regex("logs/[!x]*.log").fullmatch("logs/app.log")
    assert not pattern_regex("logs/[!x]*.log").fullmatch("logs/xapp.log")
    assert pattern_regex("out/**").fullmatch("out/a/b.txt")


@pytest.mark.parametrize("pattern", ["/etc/passwd", "../x/*.log", "a/../../b", "", "C:/x"])
def test_a_pattern_that_leaves_the_workspace_is_refused_by_the_settings(pattern: str) -> None:
    with pytest.raises(ValueError, match="artifact pattern"):
        Settings(dlq={"artifact_patterns": [pattern]})


def test_the_total_cap_must_hold_one_file() -> None:
    with pytest.raises(ValueError, match="artifact_max_total_bytes"):
        Settings(dlq={"artifact_max_bytes": 2000, "artifact_max_total_bytes": 1000})


def test_matching_files_are_kept_in_pattern_order_with_their_types(tmp_path: Path) -> None:
    _write(tmp_path, "shots/fail.png", PNG)
    _write(tmp_path, "run.log", b"step 1\nstep 2 failed\n")
    _write(tmp_path, "reports/junit.xml", b"<testsuite/>")
    _write(tmp_path, "notes.txt", b"not asked for")
    found = collect_artifacts(tmp_path, ["**/*.png", "*.log", "reports/*.xml"], CAPS)
    assert [(a.name, a.content_type, a.size_bytes, a.truncated) for a in found.artifacts] == [
        ("shots/fail.png", "image/png", len(PNG), False),
        ("run.log", "text/plain", 21, False),
        ("reports/junit.xml", "application/xml", 12, False),
    ]
    assert found.data["shots/fail.png"] == PNG
    assert found.artifacts[0].inline and not found.artifacts[1].inline


def test_a_file_is_cut_to_the_file_cap_a_log_keeping_its_end(tmp_path: Path) -> None:
    _write(tmp_path, "big.bin", bytes(range(256)) * 10)
    _write(tmp_path, "big.log", b"a" * 1500 + b"THE END")
    found = collect_artifacts(tmp_path, ["big.bin", "big.log"], CAPS)
    binary, log = found.artifacts
    assert (binary.size_bytes, binary.truncated, binary.original_bytes) == (1000, True, 2560)
    assert found.data["big.bin"] == (bytes(range(256)) * 10)[:1000]
    assert log.truncated and found.data["big.log"].endswith(b"THE END")
    assert len(found.data["big.log"]) == 1000


def test_the_total_cap_cuts_later_files_and_lists_those_left_out(tmp_path: Path) -> None:
    for i in range(4):
        _write(tmp_path, f"f{i}.bin", b"x" * 900)
    caps = ArtifactCaps(file_bytes=900, total_bytes=2000, max_files=10)
    found = collect_artifacts(tmp_path, ["*.bin"], caps)
    assert [(a.name, a.size_bytes, a.truncated) for a in found.artifacts] == [
        ("f0.bin", 900, False),
        ("f1.bin", 900, False),
        ("f2.bin", 200, True),
        ("f3.bin", 0, True),
    ]
    assert sum(len(v) for v in found.data.values()) == 2000


def test_at_most_max_files_are_kept(tmp_path: Path) -> None:
    for i in range(5):
        _write(tmp_path, f"f{i}.log", b"x")
    found = collect_artifacts(tmp_path, ["*.log"], ArtifactCaps(max_files=2))
    assert [a.name for a in found.artifacts] == ["f0.log", "f1.log"]
    assert any("max_files" in why for why in found.skipped)


def test_a_symlink_out_of_the_workspace_is_not_followed(tmp_path: Path) -> None:
    work = tmp_path / "work"
    outside = _write(tmp_path, "outside/secret.log", b"host secret")
    work.mkdir()
    (work / "passwd.log").symlink_to("/etc/passwd")
    (work / "secret.log").symlink_to(outside)
    (work / "linked").symlink_to(outside.parent, target_is_directory=True)
    found = collect_artifacts(work, ["**/*.log", "*.log"], CAPS)
    assert found.artifacts == []
    assert found.data == {}


def test_a_directory_swapped_for_a_link_after_the_walk_is_not_followed(tmp_path: Path) -> None:
    from agentfleet.dlq import evidence

    work = tmp_path / "work"
    _write(work, "logs/run.log", b"mine")
    _write(tmp_path, "outside/run.log", b"host secret")
    root_fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    try:
        (work / "logs" / "run.log").unlink()
        (work / "logs").rmdir()
        (work / "logs").symlink_to(tmp_path / "outside", target_is_directory=True)
        with pytest.raises(OSError):
            evidence._open_beneath(root_fd, "logs/run.log")
    finally:
        os.close(root_fd)


def test_a_hard_link_fifo_or_socket_is_passed_over(tmp_path: Path) -> None:
    outside = _write(tmp_path, "outside.log", b"host file")
    work = tmp_path / "work"
    work.mkdir()
    os.link(outside, work / "hard.log")
    os.mkfifo(work / "pipe.log")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(work / "sock.log"))
        found = collect_artifacts(work, ["*.log"], CAPS)
    finally:
        sock.close()
    assert found.artifacts == []
    assert sorted(found.skipped) == [
        "hard.log: it has 2 hard links",
        "pipe.log: not a regular file",
        "sock.log: not a regular file",
    ]


def test_hostile_names_are_made_safe_and_kept_apart(tmp_path: Path) -> None:
    _write(tmp_path, "<img src=x onerror=alert(1)>.log", b"a")
    _write(tmp_path, "a b\nc\u202egpj.log", b"b")
    _write(tmp_path, ".hidden.log", b"c")
    _write(tmp_path, "x?y.log", b"d")
    _write(tmp_path, "x*y.log", b"e")
    found = collect_artifacts(tmp_path, ["*.log"], CAPS)
    names = sorted(a.name for a in found.artifacts)
    assert names == [
        "_hidden.log",
        "_img_src_x_onerror_alert_1__.log",
        "a_b_c_gpj.log",
        "x_y.log",
        "x_y~2.log",
    ]
    safe = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-~/")
    assert all(set(n) <= safe for n in names)


def test_a_name_is_cut_keeping_its_extension() -> None:
    name = artifact_name("d/" + "x" * 300 + ".png")
    assert len(name) == 200 and name.endswith(".png")
    assert artifact_name("../../etc/passwd") == "etc/passwd"


def test_an_image_type_stands_only_with_its_signature() -> None:
    assert content_type_of("a.png", PNG) == "image/png"
    assert content_type_of("a.png", b"<html><script>") == "application/octet-stream"
    assert content_type_of("a.svg", b"<svg onload=x>") == "application/octet-stream"
    assert content_type_of("a.webp", b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert content_type_of("a.gif", b"GIF89a....") == "image/gif"
    assert content_type_of("a.jpg", b"\xff\xd8\xff\xe0") == "image/jpeg"
    assert content_type_of("page.html", b"<html>") == "text/html"


def test_text_artifacts_pass_the_redactor(tmp_path: Path) -> None:
    _write(tmp_path, "run.log", b"connecting with sk-live-0123456789abcdef\nfailed\n")
    redactor = Redactor.build(values=["sk-live-0123456789abcdef"])
    found = collect_artifacts(tmp_path, ["*.log"], CAPS, redactor=redactor)
    assert b"sk-live" not in found.data["run.log"]
    assert b"[REDACTED]" in found.data["run.log"]


def test_a_missing_workspace_or_no_patterns_keeps_nothing(tmp_path: Path) -> None:
    _write(tmp_path, "a.log", b"x")
    assert collect_artifacts(tmp_path / "gone", ["*.log"], CAPS).artifacts == []
    assert collect_artifacts(tmp_path, [], CAPS).artifacts == []


def test_the_walk_is_bounded(tmp_path: Path) -> None:
    for i in range(30):
        _write(tmp_path, f"f{i:02}.txt", b"x")
    found = collect_artifacts(tmp_path, ["*.txt"], ArtifactCaps(max_walk=10))
    assert len(found.artifacts) == 10
    assert any("walk stopped" in why for why in found.skipped)


def test_the_walk_stops_at_the_depth_limit(tmp_path: Path) -> None:
    from agentfleet.dlq.evidence import MAX_DEPTH

    deep = tmp_path / "/".join(["d"] * (MAX_DEPTH + 5))
    deep.mkdir(parents=True)
    (deep / "lost.log").write_bytes(b"too deep")
    _write(tmp_path, "top.log", b"found")
    found = collect_artifacts(tmp_path, ["**/*.log"], CAPS)
    assert [a.name for a in found.artifacts] == ["top.log"]
    assert any("not looked into" in why for why in found.skipped)


def test_a_workspace_of_directories_only_is_bounded_too(tmp_path: Path) -> None:
    for i in range(50):
        (tmp_path / f"d{i:02}").mkdir()
    found = collect_artifacts(tmp_path, ["**/*.log"], ArtifactCaps(max_walk=20))
    assert found.artifacts == []
    assert any("walk stopped" in why for why in found.skipped)


def test_a_known_secret_in_a_binary_file_is_overwritten_in_place(tmp_path: Path) -> None:
    secret = "sk-live-0123456789abcdef"
    _write(tmp_path, "trace.bin", b"\x00\x01" + secret.encode() + b"\xff")
    found = collect_artifacts(tmp_path, ["*.bin"], CAPS, redactor=Redactor.build(values=[secret]))
    assert found.data["trace.bin"] == b"\x00\x01" + b"*" * len(secret) + b"\xff"
