"""Run options checked at dispatch: a run's tenant, its dollar cap, and its batch size."""

from __future__ import annotations

from typing import Any

from agentfleet.errors import DispatchError

__all__ = ["batching", "run_budget", "tenancy"]


def tenancy(tenant: str | None) -> dict[str, Any]:
    """The ``ItemMeta`` field (and run record field) of a run's tenant label (none for ``None``)."""
    if tenant is None:
        return {}
    if not tenant or not tenant.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise DispatchError(f"tenant {tenant!r}: use letters, digits, '-', '_' and '.'")
    return {"tenant": tenant}


def run_budget(budget_usd: float | None) -> float | None:
    """A run's own dollar cap, checked (``None``: the run has none, ``budgets.run_usd`` holds)."""
    if budget_usd is not None and budget_usd <= 0:
        raise DispatchError(f"budget_usd must be above 0 US dollars, got {budget_usd}")
    return budget_usd


def batching(batch_size: int | None) -> dict[str, Any]:
    """The run record field of a batched map (none for ``None``)."""
    if batch_size is None:
        return {}
    if batch_size < 1:
        raise DispatchError(f"batch_size must be at least 1, got {batch_size}")
    return {"batch_size": batch_size}
