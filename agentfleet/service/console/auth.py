"""Console sessions and CSRF tokens, both derived from the service token.

Signing in means giving the service token (``service.token``) once; the console then sets a
session cookie ``{expires}.{nonce}.{signature}``: HttpOnly, ``SameSite=Strict``, scoped to the
console's path, ``Secure`` over https. The signing key is an HMAC of the service token, so
changing the token ends every session. A genuine cookie is honoured only while its nonce is
listed in Redis (``access.SessionStore``): signing out ends the session on the server, "sign
out everywhere" ends them all, and a copied cookie is then worth nothing.

Every state-changing request (sign in, sign out, requeue, purge, cancel) must carry a CSRF
token in its form: for a session, an HMAC of the session's nonce; before signing in, the
value of a short-lived random cookie (double submit). A request whose ``Origin`` (or, without
one, ``Referer``) names another host is refused as well.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

from agentfleet.access import SessionStore
from agentfleet.config import Settings

__all__ = [
    "LOGIN_COOKIE",
    "SESSION_COOKIE",
    "Session",
    "check_token",
    "csrf_ok",
    "end_every_session",
    "end_session",
    "login_nonce",
    "read_session",
    "remember_login_nonce",
    "same_origin",
    "start_session",
]

SESSION_COOKIE = "af_console"
LOGIN_COOKIE = "af_console_login"
_LOGIN_COOKIE_S = 600


@dataclass(frozen=True)
class Session:
    """A signed-in operator: the session's nonce, its expiry (Unix time) and CSRF token."""

    nonce: str
    expires_at: float
    csrf: str


def _key(settings: Settings) -> bytes | None:
    token = settings.service.token
    if token is None:
        return None
    return hmac.new(token.get_secret_value().encode(), b"agentfleet console session", hashlib.sha256).digest()


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def check_token(settings: Settings, given: str) -> bool:
    """True when ``given`` is the service token (compared in constant time)."""
    token = settings.service.token
    return token is not None and hmac.compare_digest(given.encode(), token.get_secret_value().encode())


def read_session(
    request: Request, settings: Settings, sessions: SessionStore, *, now: float | None = None
) -> Session | None:
    """The request's session when its cookie is genuine, unexpired and not signed out, else
    None. Raises ``redis.RedisError`` when Redis does not answer."""
    key = _key(settings)
    raw = request.cookies.get(SESSION_COOKIE, "")
    parts = raw.split(".")
    if key is None or len(parts) != 3:
        return None
    expires, nonce, signature = parts
    if not hmac.compare_digest(signature, _sign(key, f"{expires}.{nonce}")):
        return None
    try:
        expires_at = float(expires)
    except ValueError:
        return None
    if expires_at <= (time.time() if now is None else now) or not sessions.alive(nonce, now):
        return None
    return Session(nonce=nonce, expires_at=expires_at, csrf=_sign(key, f"csrf.{nonce}"))


def _cookie_path(request: Request) -> str:
    return request.scope.get("root_path", "") or "/"


def start_session(request: Request, response: Response, settings: Settings, sessions: SessionStore) -> None:
    """Set a new session cookie on ``response``, listed in ``sessions`` (call only after
    ``check_token``)."""
    key = _key(settings)
    assert key is not None, "no service token: the console is off"
    expires = f"{time.time() + settings.service.console_session_s:.0f}"
    nonce = secrets.token_urlsafe(18)
    sessions.start(nonce, float(expires))
    response.set_cookie(
        SESSION_COOKIE,
        f"{expires}.{nonce}.{_sign(key, f'{expires}.{nonce}')}",
        max_age=int(settings.service.console_session_s),
        path=_cookie_path(request),
        httponly=True,
        secure=request.url.scheme == "https",
        samesite="strict",
    )
    response.delete_cookie(LOGIN_COOKIE, path=_cookie_path(request))


def end_session(request: Request, response: Response, session: Session, sessions: SessionStore) -> None:
    """End ``session`` on the server and delete its cookie."""
    sessions.end(session.nonce)
    response.delete_cookie(SESSION_COOKIE, path=_cookie_path(request))


def end_every_session(request: Request, response: Response, sessions: SessionStore) -> int:
    """End every console session on the server (this one's cookie deleted); how many."""
    ended = sessions.end_all()
    response.delete_cookie(SESSION_COOKIE, path=_cookie_path(request))
    return ended


def login_nonce(request: Request) -> str:
    """The double-submit value for the sign-in form: the request's, else a new one."""
    return request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(18)


def remember_login_nonce(request: Request, response: Response, value: str) -> None:
    """Set the sign-in form's double-submit cookie on ``response``."""
    response.set_cookie(
        LOGIN_COOKIE,
        value,
        max_age=_LOGIN_COOKIE_S,
        path=_cookie_path(request),
        httponly=True,
        secure=request.url.scheme == "https",
        samesite="strict",
    )


def csrf_ok(request: Request, session: Session | None, given: str) -> bool:
    """True when ``given`` is this session's CSRF token (or, signed out, the sign-in cookie's)."""
    expected = session.csrf if session is not None else request.cookies.get(LOGIN_COOKIE, "")
    return bool(given) and bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def same_origin(request: Request) -> bool:
    """False when the request's ``Origin`` or ``Referer`` names a host other than this one."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    if not claimed or claimed == "null":
        return claimed != "null"
    return urlsplit(claimed).netloc == request.headers.get("host", request.url.netloc)
