"""How the service answers with an artifact: only safe images inline, never HTML or SVG as such."""

from __future__ import annotations

import pytest

from agentfleet.dlq.artifacts import Artifact, content_type_of
from agentfleet.service.artifact_response import artifact_response

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


def _served(name: str, data: bytes) -> tuple[str, str, dict[str, str]]:
    artifact = Artifact(name=name, size_bytes=len(data), content_type=content_type_of(name, data[:16]))
    response = artifact_response(artifact, data)
    headers = dict(response.headers)
    return headers["content-type"], headers["content-disposition"], headers


def test_an_image_is_inline_with_its_type_and_no_sniffing() -> None:
    media, disposition, headers = _served("screens/fail.png", PNG)
    assert (media, disposition) == ("image/png", 'inline; filename="fail.png"')
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["content-security-policy"] == "default-src 'none'; sandbox"
    assert headers["cache-control"] == "no-store"


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("page.html", b"<html><script>alert(1)</script>"),
        ("logo.svg", b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>'),
        ("fake.png", b"<html><script>alert(1)</script>"),
        ("noext", b"<!doctype html>"),
    ],
)
def test_html_and_svg_are_only_ever_downloads_of_no_type(name: str, data: bytes) -> None:
    media, disposition, _ = _served(name, data)
    assert media == "application/octet-stream"
    assert disposition.startswith("attachment;")


def test_a_log_is_a_plain_text_download() -> None:
    media, disposition, _ = _served("logs/run.log", b"failed\n")
    assert media == "text/plain; charset=utf-8"
    assert disposition == 'attachment; filename="run.log"'
