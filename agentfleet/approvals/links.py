"""Signed links: one URL per approval that decides it without a token, for a Slack or email message.

A link is ``{service.public_url}/approvals/{id}/decide?expires={t}&sig={hex}``: ``sig`` is the
HMAC-SHA256 of ``approval-link\\0{id}\\0{t}`` under the link secret, ``t`` a Unix time (whole
seconds) after which the link is refused. It expires with the approval (``expires_at``), or
``approvals.link_ttl_s`` seconds after the approval was made when the approval has no timeout.
Opening it (GET) shows what is asked and a form; only the form's POST decides, so a chat app
that previews the link decides nothing. It is single use because an approval takes one
decision: any later use is told who decided what, and when.

The secret is ``approvals.link_secret``, else one derived from ``service.token`` (so a fleet
with a token has working links without a second secret); with neither there are no links.
Workers (which write the link into the notification) and the service (which checks it)
must share it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from urllib.parse import urlencode

from agentfleet.approvals.model import Approval
from agentfleet.config import Settings

__all__ = ["link_expires_at", "link_for", "link_key", "sign", "valid"]

_PURPOSE = b"agentfleet approval links"


def link_key(settings: Settings) -> bytes | None:
    """The key links are signed with, or None when no secret is configured."""
    own = settings.approvals.link_secret
    if own is not None:
        return own.get_secret_value().encode()
    token = settings.service.token
    if token is None:
        return None
    return hmac.new(token.get_secret_value().encode(), _PURPOSE, hashlib.sha256).digest()


def sign(key: bytes, approval_id: str, expires: int) -> str:
    """The signature (hex) of the link to ``approval_id`` valid until ``expires`` (Unix seconds)."""
    message = f"approval-link\0{approval_id}\0{expires}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def link_expires_at(settings: Settings, approval: Approval) -> int:
    """When the link to ``approval`` stops working (Unix seconds): with the approval, else
    ``approvals.link_ttl_s`` after it was made."""
    if approval.expires_at is not None:
        return int(approval.expires_at) + 1
    return int(approval.created_at + settings.approvals.link_ttl_s)


def link_for(settings: Settings, approval: Approval, *, base_url: str | None = None) -> str | None:
    """The signed link deciding ``approval``, under ``base_url`` (default ``service.public_url``,
    else ``http://{service.host}:{service.port}``); None when no link secret is configured."""
    key = link_key(settings)
    if key is None:
        return None
    service = settings.service
    base = (base_url or service.public_url or f"http://{service.host}:{service.port}").rstrip("/")
    expires = link_expires_at(settings, approval)
    query = urlencode({"expires": expires, "sig": sign(key, approval.id, expires)})
    return f"{base}/approvals/{approval.id}/decide?{query}"


def valid(
    settings: Settings, approval_id: str, expires: str, sig: str, *, now: float | None = None
) -> str | None:
    """None when ``sig`` signs ``approval_id`` until ``expires`` and that time has not passed;
    else why the link is refused (one sentence)."""
    key = link_key(settings)
    if key is None:
        return "approval links are off: set approvals.link_secret (or service.token)"
    if not expires.isdigit() or not sig:
        return "this link is incomplete; open the whole link from the message"
    if not hmac.compare_digest(sign(key, approval_id, int(expires)), sig.lower()):
        return "this link is not valid (it was changed, or the link secret changed since it was sent)"
    if (time.time() if now is None else now) > int(expires):
        return "this link has expired"
    return None
