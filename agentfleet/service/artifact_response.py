"""How the service answers with a dead letter's artifact: safe for a browser to open.

An image of a type browsers show without running anything (PNG, JPEG, GIF, WebP, and only
when its first bytes say so: ``agentfleet.dlq.artifacts``) is served inline with its type;
anything else is an attachment, as ``text/plain`` (logs), JSON or XML, or else
``application/octet-stream``: HTML and SVG are never served as such. Every answer carries
``X-Content-Type-Options: nosniff`` and a Content-Security-Policy that allows nothing and
sandboxes the document, so even a file opened by hand runs no script.
"""

from __future__ import annotations

from starlette.responses import Response

from agentfleet.dlq.artifacts import OCTET, Artifact, download_name

__all__ = ["artifact_response"]

_DOWNLOAD_TYPES = {
    "text/plain": "text/plain; charset=utf-8",
    "text/csv": "text/csv; charset=utf-8",
    "application/json": "application/json",
    "application/xml": "application/xml",
}
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def artifact_response(artifact: Artifact, data: bytes) -> Response:
    """The response carrying ``data``, the kept bytes of ``artifact``."""
    filename = download_name(artifact.name)
    if artifact.inline:
        media_type, disposition = artifact.content_type, "inline"
    else:
        media_type, disposition = _DOWNLOAD_TYPES.get(artifact.content_type, OCTET), "attachment"
    headers = {**_HEADERS, "Content-Disposition": f'{disposition}; filename="{filename}"'}
    return Response(data, media_type=media_type, headers=headers)
