"""Run options checked at dispatch: a run's name, tenant, item keys, dollar cap and batch size.

What a user names is stored and shown (records, pages, listings), so it is bounded and never
holds a secret: a run's name (a label) is redacted and cut to ``MAX_NAME_CHARS``; a tenant and
an item key (identities, which a replacement would merge) are refused when they hold one or
are too long.
"""

from __future__ import annotations

import math
from typing import Any

from agentfleet.errors import DispatchError
from agentfleet.redaction import Redactor

__all__ = [
    "MAX_KEY_CHARS",
    "MAX_NAME_CHARS",
    "MAX_TENANT_CHARS",
    "batching",
    "checked_key",
    "no_secret",
    "run_budget",
    "run_label",
    "tenancy",
]

MAX_NAME_CHARS = 200
MAX_KEY_CHARS = 512
MAX_TENANT_CHARS = 100


def tenancy(tenant: str | None) -> dict[str, Any]:
    """The ``ItemMeta`` field (and run record field) of a run's tenant label (none for ``None``)."""
    if tenant is None:
        return {}
    if not tenant or not tenant.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise DispatchError(f"tenant {tenant!r}: use letters, digits, '-', '_' and '.'")
    if len(tenant) > MAX_TENANT_CHARS:
        raise DispatchError(f"the tenant is {len(tenant)} characters; at most {MAX_TENANT_CHARS}")
    return {"tenant": tenant}


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


def run_budget(budget_usd: float | None) -> float | None:
    """A run's own dollar cap, checked (``None``: the run has none, ``budgets.run_usd`` holds)."""
    if budget_usd is not None and not (math.isfinite(budget_usd) and budget_usd > 0):
        raise DispatchError(f"budget_usd must be above 0 US dollars and finite, got {budget_usd}")
    return budget_usd


def batching(batch_size: int | None) -> dict[str, Any]:
    """The run record field of a batched map (none for ``None``)."""
    if batch_size is None:
        return {}
    if batch_size < 1:
        raise DispatchError(f"batch_size must be at least 1, got {batch_size}")
    return {"batch_size": batch_size}
