"""Fleet tasks that tests/test_testing_seam.py runs with agentfleet.testing."""

from __future__ import annotations

from typing import Any

from agentfleet import TaskContext, fleet_task, run_agent


@fleet_task(name="tests.seam.price")
def price(ctx: TaskContext, url: str) -> dict[str, Any]:
    response = ctx.http.get(url)
    response.raise_for_status()
    return {"price": response.json()["price"], "attempt": ctx.attempt}


@fleet_task(name="tests.seam.label")
def label(ctx: TaskContext, text: str) -> dict[str, Any]:
    result = run_agent(ctx, prompt=f"Classify the sentiment, one word.\n\nText: {text}", max_tokens=8)
    return {"label": result.text.strip().lower()}


class Refusal(Exception):
    pass


@fleet_task(name="tests.seam.refuses", fail_on=(Refusal,))
def refuses(ctx: TaskContext) -> None:
    raise Refusal("the vendor refused this item")


@fleet_task(name="tests.seam.label_twice")
def label_twice(ctx: TaskContext, text: str) -> dict[str, Any]:
    first = run_agent(ctx, prompt=f"Classify the sentiment, one word.\n\nText: {text}", max_tokens=8)
    second = run_agent(ctx, prompt=f"Again, one word.\n\nText: {text}", max_tokens=8)
    return {"labels": [first.text, second.text]}
