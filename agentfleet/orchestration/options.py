"""Run options checked at dispatch, where the settings' secrets are known: a run's name, its
tenant, its items' keys. (The rest of the run options are checked by ``RunOptions`` itself,
``config/options.py``, whatever surface they came from.)

What a user names is stored and shown (records, pages, listings), so it is bounded and never
holds a secret: a run's name (a label) is redacted and cut to ``MAX_NAME_CHARS``; a tenant and
an item key (identities, which a replacement would merge) are refused when they hold one or
are too long.
"""

from __future__ import annotations

from agentfleet.errors import DispatchError
from agentfleet.redaction import Redactor

__all__ = ["MAX_KEY_CHARS", "MAX_NAME_CHARS", "checked_key", "no_secret", "run_label"]

MAX_NAME_CHARS = 200
MAX_KEY_CHARS = 512


def no_secret(value: str, what: str, redactor: Redactor) -> None:
    """Refuse ``value`` (a tenant, an item key) when it holds a secret the settings know."""
    if redactor.text(value) != value:
        raise DispatchError(
            f"the {what} holds a secret (a configured credential or token): it would be stored and "
            "shown, so derive it from something else"
        )


def run_label(label: str, redactor: Redactor) -> str:
    """A run's name as stored: secrets redacted, at most ``MAX_NAME_CHARS`` characters."""
    cleaned = redactor.text(label)
    return cleaned if len(cleaned) <= MAX_NAME_CHARS else cleaned[: MAX_NAME_CHARS - 3] + "..."


def checked_key(key: str, redactor: Redactor) -> str:
    """An item's idempotency key from ``key=``, refused when too long or holding a secret."""
    if len(key) > MAX_KEY_CHARS:
        raise DispatchError(f"key= returned {len(key)} characters; a key has at most {MAX_KEY_CHARS}")
    no_secret(key, "key= value", redactor)
    return key
