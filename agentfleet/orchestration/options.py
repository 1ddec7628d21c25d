"""Run options checked at dispatch: a run's tenant and dollar cap, and its batch size."""

from __future__ import annotations

from typing import Any

from agentfleet.errors import DispatchError

__all__ = ["batching", "run_budgets"]


def run_budgets(tenant: str | None, budget_usd: float | None) -> dict[str, Any]:
    """The ``ItemMeta`` fields (and run record fields) of a run's tenant and dollar cap."""
    found: dict[str, Any] = {}
    if tenant is not None:
        if not tenant or not tenant.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise DispatchError(f"tenant {tenant!r}: use letters, digits, '-', '_' and '.'")
        found["tenant"] = tenant
    if budget_usd is not None:
        if budget_usd <= 0:
            raise DispatchError(f"budget_usd must be above 0 US dollars, got {budget_usd}")
        found["budget_usd"] = float(budget_usd)
    return found


def batching(batch_size: int | None) -> dict[str, Any]:
    """The run record field of a batched map (none for ``None``)."""
    if batch_size is None:
        return {}
    if batch_size < 1:
        raise DispatchError(f"batch_size must be at least 1, got {batch_size}")
    return {"batch_size": batch_size}
