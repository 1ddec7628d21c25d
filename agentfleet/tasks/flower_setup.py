"""Flower configured from agentfleet's settings, however it is started, and never open by accident.

``agentfleet flower`` and ``celery -A agentfleet.celery_app flower`` both run Flower's own
command. It reads its options (command line, ``FLOWER_*`` variables, ``flowerconfig.py``),
sets up logging, then builds its web application, which imports the app's task modules
(this one among them) before Flower binds its port and serves a request. Imported there,
this module applies agentfleet's settings to Flower's options:

- basic auth from ``flower.basic_auth``, unless Flower was given its own (``--basic-auth``,
  or ``--auth`` for OAuth);
- the address ``flower.host`` (127.0.0.1) and port ``flower.port``, unless given to Flower
  itself: Flower alone would listen on every interface;
- with no authentication at all Flower stops with one line on stderr, unless
  ``flower.insecure`` is true (``agentfleet flower --insecure`` sets it);
- the secret filter on every log handler (``process_logging``).

Imported anywhere but in Flower's command, it does nothing.
"""

from __future__ import annotations

import sys
from typing import Any

from agentfleet.config import Settings, get_settings
from agentfleet.errors import AgentfleetError, ConfigError
from agentfleet.tasks.process_logging import install_secret_filter

__all__ = ["apply_settings", "flower_auth", "in_flower"]

OPEN_REFUSED = (
    "Flower would start without authentication: set AGENTFLEET_FLOWER__BASIC_AUTH=user:password "
    "(or AGENTFLEET_FLOWER__INSECURE=true, `agentfleet flower --insecure`, on a machine only you can reach)"
)


def flower_auth(settings: Settings, *, has_own_auth: bool = False) -> list[str]:
    """Flower's ``basic_auth`` list from ``settings``; ``ConfigError`` when Flower would be open.

    ``has_own_auth`` says Flower was already given authentication of its own.
    """
    auth = settings.flower.basic_auth
    if auth is not None:
        return [auth.get_secret_value()]
    if not has_own_auth and not settings.flower.insecure:
        raise ConfigError(OPEN_REFUSED)
    return []


def in_flower() -> bool:
    """True inside Flower's command (``celery ... flower``), while it builds its application."""
    if "flower.command" not in sys.modules:
        return False
    import click

    context = click.get_current_context(silent=True)
    return context is not None and context.info_name == "flower"


def _is_default(options: Any, name: str) -> bool:
    option = options._options[name]  # tornado keeps each option's default only here
    return bool(option.value() == option.default)


def apply_settings(options: Any, settings: Settings) -> None:
    """Put ``settings.flower`` into Flower's tornado ``options``; ``ConfigError`` if it would be open."""
    own_auth = bool(options.basic_auth or options.auth)
    basic_auth = flower_auth(settings, has_own_auth=own_auth)
    if not options.basic_auth and basic_auth:
        options.basic_auth = basic_auth
    if _is_default(options, "address"):
        options.address = settings.flower.host
    if _is_default(options, "port"):
        options.port = settings.flower.port


def _configure_this_flower() -> None:
    from tornado.options import options

    try:
        apply_settings(options, get_settings())
    except AgentfleetError as exc:
        # Raised while Flower builds its application: nothing is bound or served yet.
        raise SystemExit(f"error: {exc}") from None
    install_secret_filter()


if in_flower():
    _configure_this_flower()
