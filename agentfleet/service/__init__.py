"""``agentfleet serve``: health, metrics and the webhook trigger, as a small ASGI app."""

from agentfleet.service.app import ServiceState, create_app
from agentfleet.service.collectors import DEFAULT_COLLECTORS, Collector, Sample

__all__ = ["DEFAULT_COLLECTORS", "Collector", "Sample", "ServiceState", "create_app"]
