"""Redis URLs in settings: checked before anything connects, with the password apart or encoded.

A password in a URL must be percent-encoded: ``/`` as ``%2F``, ``+`` as ``%2B``, ``=`` as
``%3D``, ``@`` as ``%40``, ``:`` as ``%3A``, ``%`` as ``%25``. redis-py, kombu and Celery's
result backend all decode it. Unencoded, a ``/`` ends the host part, so the rest of the
password is read as the port or the path; ``check_redis_url`` says so in one line rather
than letting a client fail later. ``with_password`` puts a password given apart
(``AGENTFLEET_REDIS_PASSWORD``) into a URL, encoded. No message here holds a password.
"""

from __future__ import annotations

from urllib.parse import quote, unquote, urlsplit

from agentfleet.redis_client import mask_url

__all__ = ["ENCODING_HINT", "check_redis_url", "url_password", "with_password", "without_password"]

SCHEMES = ("redis://", "rediss://", "unix://", "sentinel://")
ENCODING_HINT = (
    "percent-encode the password in the URL ('/' as %2F, '+' as %2B, '=' as %3D, '@' as %40), "
    "or give it apart in AGENTFLEET_REDIS_PASSWORD"
)


def check_redis_url(url: str) -> None:
    """Raise ``ValueError`` (a message without the password) unless ``url`` is a usable Redis URL.

    ``sentinel://`` URLs may list several Sentinels joined by ``;``; each part is checked.
    """
    if not url.startswith(SCHEMES):
        raise ValueError(
            "must be a Redis URL such as redis://:password@host:6379/0, or Sentinels as "
            "sentinel://:password@host1:26379;sentinel://host2:26379"
        )
    if url.startswith("unix://"):
        return
    for part in url.split(";"):
        _check_part(part)


def _check_part(url: str) -> None:
    authority = url.split("://", 1)[-1]
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        port = -1
    # '@' after the host part means the URL's userinfo was cut short by a raw '/', '?' or '#'.
    stray_at = "/" in authority and "@" in authority.split("/", 1)[1]
    if port == -1 or stray_at or not parts.hostname:
        if "@" in authority:
            raise ValueError(f"cannot be read: {ENCODING_HINT}")
        raise ValueError("cannot be read: it needs a host, e.g. redis://host:6379/0")


def url_password(url: str) -> str | None:
    """The decoded password of ``url``, or None."""
    try:
        password = urlsplit(url).password
    except ValueError:
        return None
    return unquote(password) if password else None


def with_password(url: str, password: str) -> str:
    """``url`` with ``password`` (percent-encoded) as its password, in every ``;``-joined part.

    ``ValueError`` if a part already has another password.
    """
    return ";".join(_with_password(part, password) for part in url.split(";"))


def _with_password(url: str, password: str) -> str:
    scheme, _, rest = url.partition("://")
    userinfo, at, location = rest.rpartition("@")
    if at:
        user, _, existing = userinfo.partition(":")
        if existing and unquote(existing) != password:
            raise ValueError(
                f"{mask_url(url)} has a password and AGENTFLEET_REDIS_PASSWORD gives another; "
                "set it in one place"
            )
    else:
        user, location = "", rest
    return f"{scheme}://{user}:{quote(password, safe='')}@{location}"


def without_password(url: str) -> str:
    """``url`` with no password (its user name, if any, kept), for a client given the password apart."""
    scheme, _, rest = url.partition("://")
    userinfo, at, location = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}@{location}" if user else f"{scheme}://{location}"
