"""Broker mistakes told as they are: a URL that cannot be right, a refused password, no answer.

- ``url_problem(url)``: what is wrong with a Redis URL's shape, in one sentence that never
  repeats its password (an unencoded ``/``, ``?`` or ``#`` in a password ends the address
  early, so the host and port read as garbage);
- ``check_broker(target)``: one ``PING`` with short timeouts and no retries; a refused
  password raises ``ConfigError`` saying so, no answer raises ``BrokerUnavailable``;
- ``credentials_refused(exc)``: whether a Redis error is an authentication failure, which no
  amount of waiting cures (``ride_out`` gives up on it at once).

Every message shows the URL through ``mask_url``.
"""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlsplit

import redis

from agentfleet.errors import BrokerUnavailable, ConfigError
from agentfleet.redis_client import RedisTarget, connect, mask_url

__all__ = ["BROKER_SETTING", "check_broker", "credentials_refused", "refused_error", "url_problem"]

BROKER_SETTING = "AGENTFLEET_BROKER_URL (broker_url in agentfleet.toml)"

_ENCODING_HINT = "percent-encode it (/ is %2F, ? is %3F, # is %23, @ is %40, % is %25)"
# What Redis and kombu say when credentials are missing or wrong.
_AUTH_MARKERS = ("wrongpass", "noauth", "invalid username-password", "authentication required")


def _part_problem(part: str) -> str | None:
    parts = urlsplit(part.strip())
    if parts.scheme == "unix":
        return None if parts.path else "a unix:// URL needs the socket's path, e.g. unix:///run/redis.sock"
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment:
        return (
            "its password seems to contain '/', '?' or '#', which end the address part of a URL, so "
            f"the host cannot be read; {_ENCODING_HINT}"
        )
    try:
        parts.port  # noqa: B018 - reading it is the check
    except ValueError:
        return (
            "its port is not a number (a ':' after the host must be followed by the port; a password "
            f"goes before the host, as redis://:PASSWORD@host:6379/0, and if it holds '/', '?' or '#', "
            f"{_ENCODING_HINT})"
        )
    if not parts.hostname:
        return "it names no host; write it as redis://[:PASSWORD@]host:6379/0"
    database = parts.path.strip("/")
    if database and not database.isdigit():
        return f"its database must be a number, as in redis://host:6379/0, not /{database}"
    return None


def url_problem(url: str) -> str | None:
    """What is wrong with the shape of a Redis or Sentinel URL, or None when it can be right.

    The scheme is checked by the settings; this looks at what follows it. The message never
    contains the password.
    """
    for part in url.split(";"):
        problem = _part_problem(part)
        if problem is not None:
            return problem
    return None


def credentials_refused(exc: BaseException) -> bool:
    """True when ``exc`` says Redis refused (or wanted) a password, not that it is unreachable."""
    if isinstance(exc, redis.AuthenticationError):
        return True
    if isinstance(exc, redis.ResponseError):
        text = str(exc).lower()
        return any(marker in text for marker in _AUTH_MARKERS)
    cause = exc.__cause__ or exc.__context__
    return cause is not None and cause is not exc and credentials_refused(cause)


def refused_error(url: str, exc: BaseException, setting: str = BROKER_SETTING) -> ConfigError:
    """The error for a Redis at ``url`` that refused its credentials with ``exc``."""
    if not any(urlsplit(part.strip()).password for part in url.split(";")):
        return ConfigError(
            f"Redis at {mask_url(url)} requires a password and the URL gives none; put it in {setting} "
            f"as redis://:PASSWORD@host:6379/0 (if it holds '/', '?' or '#', {_ENCODING_HINT})"
        )
    reason = str(exc).split(". ")[0].strip().rstrip(".") or type(exc).__name__
    return ConfigError(f"Redis at {mask_url(url)} refused the password ({reason}); check it in {setting}")


def check_broker(target: RedisTarget, *, timeout_s: float = 2.0, setting: str = BROKER_SETTING) -> None:
    """Raise unless the Redis of ``target`` answers a ``PING`` within ``timeout_s`` seconds.

    ``ConfigError`` for a malformed URL or refused credentials (both name ``setting``),
    ``BrokerUnavailable`` when nothing answers.
    """
    problem = url_problem(target.url)
    if problem is not None:
        raise ConfigError(f"{setting}: {mask_url(target.url)} cannot be right: {problem}")
    probe = replace(
        target, connect_timeout_s=timeout_s, socket_timeout_s=timeout_s, retries=0, pool_timeout_s=timeout_s
    )
    try:
        connect(probe).ping()
    except redis.RedisError as exc:
        if credentials_refused(exc):
            raise refused_error(target.url, exc, setting) from None
        raise BrokerUnavailable(
            f"no Redis answers at {mask_url(target.url)} ({type(exc).__name__}: {exc}); start it, "
            f"or point {setting} at one that runs"
        ) from None
