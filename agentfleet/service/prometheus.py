"""Samples as Prometheus text, through ``prometheus_client``'s own exposition.

``render`` exposes one collection: ``agentfleet_up`` (1 when Redis answered, 0 when it did
not, so a scrape of a fleet whose Redis is down still succeeds and says so), then every
sample, grouped into one family per metric name with its HELP and TYPE. A counter's samples
keep their ``_total`` names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentfleet.service.samples import Sample

__all__ = ["CONTENT_TYPE", "UP", "render"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
UP = "agentfleet_up"


def _family(name: str, members: Sequence[Sample]) -> Metric:
    labels = list(dict.fromkeys(key for sample in members for key in sample.labels))
    first = members[0]
    family: GaugeMetricFamily | CounterMetricFamily
    if first.kind == "counter":
        family = CounterMetricFamily(name, first.help or name, labels=labels)
    else:
        family = GaugeMetricFamily(name, first.help or name, labels=labels)
    for sample in members:
        family.add_metric([str(sample.labels.get(key, "")) for key in labels], float(sample.value))
    return family


class _Snapshot(Collector):
    """One collection's samples, as ``prometheus_client`` collects them."""

    def __init__(self, samples: Iterable[Sample]) -> None:
        self._families: dict[str, list[Sample]] = {}
        for sample in samples:
            self._families.setdefault(sample.name, []).append(sample)

    def collect(self) -> Iterator[Metric]:
        for name, members in self._families.items():
            yield _family(name, members)


def render(samples: Iterable[Sample], *, up: bool = True) -> bytes:
    """The exposition of ``samples``, led by ``agentfleet_up`` (``up``: Redis answered)."""
    gauge = Sample(UP, 1.0 if up else 0.0, help="1 when this service could read the fleet's Redis, else 0.")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot([gauge, *samples]))
    return generate_latest(registry)
