"""Fleet tasks that tests/test_testing_seam.py runs with agentfleet.testing."""

from __future__ import annotations

import time
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


#: Each page ``pages`` fetched (not those a stored step gave back), in order.
fetched: list[int] = []


def _fetch(i: int) -> int:
    fetched.append(i)
    return i


@fleet_task(name="tests.seam.pages")
def pages(ctx: TaskContext, n: int, pause_s: float = 0.0) -> dict[str, Any]:
    """``n`` steps ``pause_s`` seconds apart; what the claim said at the end."""
    done = []
    for i in range(n):
        done.append(ctx.step("page", _fetch, i))
        time.sleep(pause_s)
    return {"done": done, "claim_lost": ctx.claim_lost}


@fleet_task(name="tests.seam.quiet")
def quiet(ctx: TaskContext) -> dict[str, Any]:
    """No fleet call at all: a lost claim stops nothing."""
    return {"claim_lost": ctx.claim_lost}
