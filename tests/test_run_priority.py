"""Run priorities: which run's waiting messages a worker takes first."""

from __future__ import annotations

import pytest

from agentfleet.celery_config import make_app
from agentfleet.config import load_settings, options
from agentfleet.errors import DispatchError
from agentfleet.orchestration.priority import RUN_PRIORITY, SMALL_RUN_PRIORITY, run_priority
from agentfleet.protocol.messages import MAX_PRIORITY, item_signature, message_priority
from agentfleet.protocol.meta import ItemMeta

SETTINGS = load_settings(dispatch={"small_run_items": 100})


def test_a_small_run_is_served_ahead_of_a_large_one_by_default() -> None:
    assert run_priority(None, 100, SETTINGS) == SMALL_RUN_PRIORITY
    assert run_priority(None, 101, SETTINGS) == RUN_PRIORITY
    assert SMALL_RUN_PRIORITY > RUN_PRIORITY


def test_a_given_priority_wins_over_the_size() -> None:
    assert run_priority(1, 5, SETTINGS) == 1
    assert run_priority(9, 10_000, SETTINGS) == 9


def test_a_priority_out_of_range_is_refused_with_the_range() -> None:
    with pytest.raises(DispatchError, match="between 0 and 9"):
        run_priority(10, 5, SETTINGS)


def test_the_run_options_take_every_priority_a_message_can_carry() -> None:
    assert options.MAX_PRIORITY == MAX_PRIORITY
    with pytest.raises(DispatchError, match="priority must be a whole number from 0 to 9"):
        options.run_options(priority=MAX_PRIORITY + 1)


def test_higher_run_priorities_land_in_kombus_earlier_lists() -> None:
    # kombu's Redis transport serves lower numbers first, in lists of 0-2, 3-5, 6-8 and 9.
    assert message_priority(9) == 0 and message_priority(0) == 9
    assert message_priority(SMALL_RUN_PRIORITY) // 3 < message_priority(RUN_PRIORITY) // 3


def test_every_stage_of_an_item_carries_the_priority() -> None:
    app = make_app(load_settings(broker_url="redis://127.0.0.1:9/0"))
    meta = ItemMeta(run="r1", key="k", item="0", stages=2)
    chain = item_signature(app, names=["a", "b"], queues=["q", "q"], meta=meta, inputs={}, priority=8)
    assert [sig.options["priority"] for sig in chain.tasks] == [1, 1]
