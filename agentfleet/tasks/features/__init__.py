"""The delivery's features, in the order a delivery calls them (see ``tasks/hooks.py``).

The order matters where two features use one hook: a graph step moves its graph on before
the aggregate looks at whether the run ended, and a run's aggregate is sent again before its
compensation is.
"""

from __future__ import annotations

from agentfleet.tasks.features.aggregate import Aggregate
from agentfleet.tasks.features.approval import Approvals
from agentfleet.tasks.features.batch import Batch
from agentfleet.tasks.features.compensation import Compensation
from agentfleet.tasks.features.deferral import Deferral
from agentfleet.tasks.features.fail_fast import FailFast
from agentfleet.tasks.features.graph import Graph
from agentfleet.tasks.features.pipeline import Pipeline
from agentfleet.tasks.features.pools import Pool
from agentfleet.tasks.hooks import DeliveryFeature

__all__ = ["FEATURES"]

FEATURES: tuple[DeliveryFeature, ...] = (
    Approvals(),
    Pipeline(),
    Graph(),
    Batch(),
    Pool(),
    Aggregate(),
    Compensation(),
    Deferral(),
    FailFast(),
)
