"""A dead letter's artifacts: files the failed item left in its workspace, kept as evidence.

``Artifact`` is what an entry lists of each (``DeadLetter.artifacts``), without its bytes; the
bytes live beside the entry in Redis (``DLQStore.artifact``). The rules for what a name may
be and which content type a file is shown as live here, so the worker that keeps a file and
the surfaces that serve it agree:

- a name is the file's path relative to the workspace, ``/``-separated, each part of it made
  of ``A-Z a-z 0-9 . _ -`` (anything else becomes ``_``; a leading ``.`` too), at most
  ``MAX_NAME_CHARS`` characters;
- a content type comes from the file's extension, and an image type stands only when the
  file's first bytes are that image's signature (a ``.png`` holding HTML is
  ``application/octet-stream``). Only ``INLINE_TYPES`` (PNG, JPEG, GIF, WebP) are ever shown
  inline; HTML and SVG never are.
"""

from __future__ import annotations

import mimetypes
import re

from pydantic import BaseModel, ConfigDict

__all__ = [
    "INLINE_TYPES",
    "MAX_NAME_CHARS",
    "Artifact",
    "artifact_name",
    "content_type_of",
    "download_name",
    "inline",
]

MAX_NAME_CHARS = 200
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
_SIGNATURES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
}
# Types named by extension that mimetypes does not know everywhere.
_EXTRA = {
    ".log": "text/plain",
    ".webp": "image/webp",
    ".jsonl": "application/json",
    ".md": "text/plain",
    ".xml": "application/xml",
}
# Python's own table, not the host's /etc/mime.types: every worker names a file alike.
_TYPES = mimetypes.MimeTypes().types_map[True]
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
OCTET = "application/octet-stream"


class Artifact(BaseModel):
    """One kept file: ``name`` (see the module docs), ``size_bytes`` kept, ``content_type``,
    ``truncated`` (cut to the size caps: ``original_bytes`` is the file's whole size)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    size_bytes: int
    content_type: str
    truncated: bool = False
    original_bytes: int = 0

    @property
    def inline(self) -> bool:
        """Whether a browser may be shown this artifact inline (an image of a safe type)."""
        return inline(self.content_type)


def inline(content_type: str) -> bool:
    return content_type in INLINE_TYPES


def artifact_name(relative: str) -> str:
    """The artifact name of a file at ``relative`` (``/``-separated, inside the workspace)."""
    parts = []
    for part in relative.split("/"):
        if not part or part in (".", ".."):
            continue
        cleaned = _UNSAFE.sub("_", part)
        parts.append("_" + cleaned[1:] if cleaned.startswith(".") else cleaned)
    name = "/".join(parts) or "_"
    if len(name) > MAX_NAME_CHARS:
        # Keep the end: the extension says what the file is.
        name = name[-MAX_NAME_CHARS:].lstrip("/.") or "_"
    return name


def download_name(name: str) -> str:
    """The file name a download of artifact ``name`` suggests (its last part, already safe)."""
    return name.rsplit("/", 1)[-1]


def _is_webp(head: bytes) -> bool:
    return head[:4] == b"RIFF" and head[8:12] == b"WEBP"


def content_type_of(name: str, head: bytes) -> str:
    """The content type of a file named ``name`` whose first bytes are ``head`` (16 will do)."""
    lower = name.lower()
    dot = lower.rfind(".")
    ext = lower[dot:] if dot > lower.rfind("/") else ""
    guessed = _EXTRA.get(ext) or _TYPES.get(ext) or OCTET
    if guessed.startswith("image/"):
        if guessed == "image/webp":
            return guessed if _is_webp(head) else OCTET
        signatures = _SIGNATURES.get(guessed)
        return guessed if signatures and head.startswith(signatures) else OCTET
    return guessed
