"""`proxy/observe/counted.py` against prometheus_client itself: the same events given to its
`Counter` and `Histogram` and to `CountedFamily` and `LatencyFamily` give the same exposition,
sample for sample (names, labels, values, order), `_created` series included (their timestamps
are when each series began, so only where they stand is compared)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    enable_created_metrics,
    generate_latest,
)

from proxy.metrics import UPSTREAM_BUCKETS
from proxy.observe.counted import CountedFamily, LatencyFamily

_LABEL_VALUES = st.sampled_from(["main", "b", "tools/call", "tasks/get", "-32603", 'quote"d', "back\\slash", "new\nline", "é"])
_COUNTS = st.lists(st.tuples(_LABEL_VALUES, _LABEL_VALUES), max_size=40)
_SECONDS = st.one_of(
    st.sampled_from([0.0, *UPSTREAM_BUCKETS, 1e-9, 0.0050000001, 300.0000001, 1e6]),
    st.floats(min_value=0.0, max_value=400.0, allow_nan=False),
)
_OBSERVATIONS = st.lists(st.tuples(_LABEL_VALUES, _SECONDS), max_size=40)


def _both() -> tuple[CollectorRegistry, CollectorRegistry]:
    return CollectorRegistry(auto_describe=True), CollectorRegistry(auto_describe=True)


def _samples(registry: CollectorRegistry) -> list[tuple[str, str, dict[str, str], float | str]]:
    """Every sample of `registry` as (family type, name, labels, value), a `_created` value as "created"."""
    return [
        (family.type, sample.name, sample.labels, "created" if sample.name.endswith("_created") else sample.value)
        for family in registry.collect()
        for sample in family.samples
    ]


def _text(registry: CollectorRegistry) -> str:
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", generate_latest(registry).decode())


@settings(max_examples=200, deadline=None)
@given(events=_COUNTS)
def test_a_counted_family_exposes_what_a_counter_would(events: list[tuple[str, str]]) -> None:
    theirs, ours = _both()
    counter = Counter("mcp_tasks_proxy_things", "Things, by backend and method", ["backend", "method"], registry=theirs)
    counted = CountedFamily("mcp_tasks_proxy_things", "Things, by backend and method", ["backend", "method"], ours)
    for values in events:
        counter.labels(*values).inc()
        counted.inc(values)
    assert _samples(ours) == _samples(theirs)
    assert _text(ours) == _text(theirs)


@settings(max_examples=200, deadline=None)
@given(events=_OBSERVATIONS)
def test_a_latency_family_exposes_what_a_histogram_would(events: list[tuple[str, float]]) -> None:
    theirs, ours = _both()
    histogram = Histogram(
        "mcp_tasks_proxy_wait_seconds", "Waits, by backend", ["backend"], buckets=UPSTREAM_BUCKETS, registry=theirs
    )
    latency = LatencyFamily("mcp_tasks_proxy_wait_seconds", "Waits, by backend", ["backend"], UPSTREAM_BUCKETS, ours)
    for backend, seconds in events:
        histogram.labels(backend).observe(seconds)
        latency.observe((backend,), seconds)
    assert _samples(ours) == _samples(theirs)
    assert _text(ours) == _text(theirs)


def test_created_series_follow_prometheus_clients_switch() -> None:
    theirs, ours = _both()
    Counter("mcp_tasks_proxy_things", "Things", ["backend"], registry=theirs).labels("main").inc()
    CountedFamily("mcp_tasks_proxy_things", "Things", ["backend"], ours).inc(("main",))
    Histogram("mcp_tasks_proxy_wait_seconds", "Waits", ["backend"], buckets=(0.5, 1.0), registry=theirs).labels("main").observe(
        0.7
    )
    LatencyFamily("mcp_tasks_proxy_wait_seconds", "Waits", ["backend"], (0.5, 1.0), ours).observe(("main",), 0.7)
    disable_created_metrics()
    try:
        assert generate_latest(ours) == generate_latest(theirs)
        assert b"_created" not in generate_latest(ours)
    finally:
        enable_created_metrics()
    assert [sample[1] for sample in _samples(ours)] == [
        "mcp_tasks_proxy_things_total",
        "mcp_tasks_proxy_things_created",
        "mcp_tasks_proxy_wait_seconds_bucket",
        "mcp_tasks_proxy_wait_seconds_bucket",
        "mcp_tasks_proxy_wait_seconds_bucket",
        "mcp_tasks_proxy_wait_seconds_count",
        "mcp_tasks_proxy_wait_seconds_sum",
        "mcp_tasks_proxy_wait_seconds_created",
    ]


def test_a_name_taken_twice_is_refused_as_prometheus_client_refuses_it() -> None:
    registry = CollectorRegistry(auto_describe=True)
    Counter("mcp_tasks_proxy_things", "Things", ["backend"], registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries in CollectorRegistry: {'mcp_tasks_proxy_things"):
        CountedFamily("mcp_tasks_proxy_things", "Things", ["backend"], registry)


@pytest.mark.parametrize("bounds", [(), (1.0, 0.5), (0.5, 0.5), (0.5, float("inf"))])
def test_bucket_bounds_that_are_not_finite_distinct_and_increasing_are_refused(bounds: tuple[float, ...]) -> None:
    with pytest.raises(
        ValueError, match=r"^mcp_tasks_proxy_wait_seconds: bucket bounds must be finite, distinct and in increasing order$"
    ):
        LatencyFamily("mcp_tasks_proxy_wait_seconds", "Waits", ["backend"], bounds, CollectorRegistry())


def test_label_values_are_exposed_as_text_as_prometheus_clients_labels_makes_them() -> None:
    theirs, ours = _both()
    Counter("mcp_tasks_proxy_things", "Things", ["code"], registry=theirs).labels(-32603).inc()
    CountedFamily("mcp_tasks_proxy_things", "Things", ["code"], ours).inc((-32603,))  # type: ignore[arg-type]
    assert _samples(ours) == _samples(theirs)
    assert _text(ours) == _text(theirs)
