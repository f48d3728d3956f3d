"""`/metrics` of a proxy with `--workers` > 1 (docs/decisions.md §96): every worker's counters and
histograms added up in the store (`proxy/observe/lasting.py` flushes each worker's increase with
its figures), its gauges summed over the live workers; each family's name, help and type are
this process's registry's. Read after the same wait as the status page, so a scrape counts every
request answered before it."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric


class _Totals:
    """A collector yielding the families of `local` with the samples of `totals`."""

    def __init__(self, local: CollectorRegistry, counters: dict[str, float], gauges: dict[str, float]):
        self.local = local
        self.counters = counters
        self.gauges = gauges

    def collect(self) -> Iterator[Metric]:
        by_family: dict[str, list[tuple[str, dict[str, str], float]]] = {}
        for source in (self.counters, self.gauges):
            for name, sample, labels, value in stored_samples(source):
                by_family.setdefault(name, []).append((sample, labels, value))
        for family in self.local.collect():
            out = Metric(family.name, family.documentation, family.type, family.unit)
            for sample, labels, value in sorted(by_family.get(family.name, []), key=_order):
                out.add_sample(sample, labels, value)
            yield out


def stored_samples(stored: Mapping[str, float]) -> Iterator[tuple[str, str, dict[str, str], float]]:
    """The samples the store keeps (`<family> <sample> <labels as JSON>` → value: `Lasting` flushes
    them so) as (family, sample, labels, value)."""
    for key, value in stored.items():
        family, sample, encoded = key.split(" ", 2)
        yield family, sample, dict(json.loads(encoded)), value


def _order(sample: tuple[str, dict[str, str], float]) -> tuple[Any, ...]:
    """Samples of one family in a stable order: by labels, a histogram's buckets by bound."""
    name, labels, _ = sample
    le = labels.get("le")
    bound = float(le) if le is not None else 0.0
    rest = sorted((k, v) for k, v in labels.items() if k != "le")
    return (rest, name, bound)


async def exposition(local: CollectorRegistry, lasting: Any) -> bytes:
    """The Prometheus text of this replica's workers added up."""
    counters, gauges = await lasting.metric_totals()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Totals(local, counters, gauges))
    return generate_latest(registry)
