"""Broker mistakes told as they are: a refused password, a missing one, no answer at all.

(A URL that cannot be right is refused earlier, by the settings: ``config/redis_url.py``.)

- ``check_broker(target)``: one ``PING`` with short timeouts and no retries; a refused or
  missing password raises ``ConfigError`` saying so, no answer raises ``BrokerUnavailable``;
- ``credentials_refused(exc)``: whether a Redis error is an authentication failure, which no
  amount of waiting cures (``Patience.call`` gives up on it at once).

Every message shows the URL through ``mask_url``.
"""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlsplit

import redis

from agentfleet.errors import BrokerUnavailable, ConfigError
from agentfleet.redis_client import RedisTarget, connect, mask_url

__all__ = ["BROKER_SETTING", "check_broker", "credentials_refused", "refused_error"]

BROKER_SETTING = "AGENTFLEET_BROKER_URL (broker_url in agentfleet.toml)"

_ENCODING_HINT = "percent-encoded: / as %2F, + as %2B, = as %3D, @ as %40"
# What Redis and kombu say when credentials are missing or wrong.
_AUTH_MARKERS = ("wrongpass", "noauth", "invalid username-password", "authentication required")


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
            f"as redis://:PASSWORD@host:6379/0 ({_ENCODING_HINT}), or give it apart in "
            "AGENTFLEET_REDIS_PASSWORD"
        )
    reason = str(exc).split(". ")[0].strip().rstrip(".") or type(exc).__name__
    return ConfigError(f"Redis at {mask_url(url)} refused the password ({reason}); check it in {setting}")


def check_broker(target: RedisTarget, *, timeout_s: float = 2.0, setting: str = BROKER_SETTING) -> None:
    """Raise unless the Redis of ``target`` answers a ``PING`` within ``timeout_s`` seconds.

    ``ConfigError`` for refused or missing credentials (naming ``setting``),
    ``BrokerUnavailable`` when nothing answers.
    """
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
