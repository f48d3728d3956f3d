"""Counter and histogram families counted in plain dicts and handed to prometheus_client at
scrape time (docs/decisions.md §187).

prometheus_client's `Counter` and `Histogram` children take a lock, check that they may be
observed and look for exemplars at every event: 4,900 instructions an `inc` and 8,900 an
`observe` (prometheus_client 0.26, CPython 3.11), three of them on every relayed call. The proxy
counts on its event loop's thread only, and reads its registry there too (`/metrics`, the store's
flush in `proxy/observe/lasting.py`), so a dict entry does: `CountedFamily.inc` and
`LatencyFamily.observe` are one or two dict operations. `collect` yields what prometheus_client
would for the same events (the same family, sample names, labels, order and `_created` series),
so `/metrics` and everything that reads the registry cannot tell the difference.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Sequence

from prometheus_client import metrics as client_metrics
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import INF, floatToGoString

LabelValues = tuple[str, ...]


def _created_series() -> bool:
    """Whether `_created` samples are exported: prometheus_client's own switch
    (`disable_created_metrics`, `PROMETHEUS_DISABLE_CREATED_SERIES`), read at scrape time."""
    return bool(getattr(client_metrics, "_use_created", True))


class _Family(Collector):
    """What both kinds of family share: `name`, `documentation`, `labelnames`, when each label set
    was first seen (its `_created` sample), and registration in `registry`."""

    TYPE = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry):
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._created: dict[LabelValues, float] = {}
        registry.register(self)

    def _labels(self, values: LabelValues) -> dict[str, str]:
        return dict(zip(self.labelnames, map(str, values), strict=True))  # as `labels()` made them

    def describe(self) -> Iterable[Metric]:
        yield Metric(self.name, self.documentation, self.TYPE)


class CountedFamily(_Family):
    """A counter family `name` (exported as `<name>_total`) with `labelnames`, registered in
    `registry`. `inc(values)` counts one event under `values` (one per label, in order)."""

    TYPE = "counter"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry):
        self.counts: dict[LabelValues, int] = {}
        """Events by label values: read by tests and by `collect`."""
        super().__init__(name, documentation, labelnames, registry)

    def inc(self, values: LabelValues) -> None:
        counts = self.counts
        count = counts.get(values)
        if count is None:
            self._created[values] = time.time()
            count = 0
        counts[values] = count + 1

    def collect(self) -> Iterable[Metric]:
        family = Metric(self.name, self.documentation, self.TYPE)
        created = _created_series()
        total, created_name = self.name + "_total", self.name + "_created"
        for values, count in list(self.counts.items()):
            labels = self._labels(values)
            family.add_sample(total, labels, float(count))
            if created:
                family.add_sample(created_name, labels, self._created[values])
        yield family


class LatencyFamily(_Family):
    """A histogram family `name` with `labelnames` and the upper `bounds` of its buckets (`+Inf`
    added), registered in `registry`. `observe(values, seconds)` counts one duration (a NaN, which
    no clock gives, would land in the first bucket, where prometheus_client counts it in none)."""

    TYPE = "histogram"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], bounds: Sequence[float],
                 registry: CollectorRegistry):
        self.bounds = tuple(float(bound) for bound in bounds)
        if list(self.bounds) != sorted(set(self.bounds)) or not self.bounds or self.bounds[-1] == INF:
            raise ValueError(f"{name}: bucket bounds must be finite, distinct and in increasing order")
        self._les = [floatToGoString(bound) for bound in (*self.bounds, INF)]  # type: ignore[no-untyped-call]
        self.series: dict[LabelValues, list[float]] = {}
        """By label values: each bucket's own count (not cumulative; the last is `+Inf`'s), then the sum."""
        super().__init__(name, documentation, labelnames, registry)

    def observe(self, values: LabelValues, seconds: float) -> None:
        series = self.series.get(values)
        if series is None:
            series = self.series[values] = [0.0] * (len(self.bounds) + 2)
            self._created[values] = time.time()
        # The first bucket whose bound is at least `seconds` (Prometheus' `le`); past the last, `+Inf`'s.
        series[bisect.bisect_left(self.bounds, seconds)] += 1
        series[-1] += seconds

    def collect(self) -> Iterable[Metric]:
        family = Metric(self.name, self.documentation, self.TYPE)
        created = _created_series()
        bucket, count_name, sum_name, created_name = (self.name + suffix for suffix in ("_bucket", "_count", "_sum", "_created"))
        for values, series in list(self.series.items()):
            labels = self._labels(values)
            cumulative = 0.0
            for le, count in zip(self._les, series, strict=False):  # the sum, last, is not a bucket
                cumulative += count
                family.add_sample(bucket, {**labels, "le": le}, cumulative)
            family.add_sample(count_name, labels, cumulative)
            family.add_sample(sum_name, labels, series[-1])
            if created:
                family.add_sample(created_name, labels, self._created[values])
        yield family
