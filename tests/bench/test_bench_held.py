"""`mcp-tasks-proxy bench --held` (proxy/bench/held.py): a small run gives every figure of the
held-task row, from real processes (the fast upstream and `proxy serve`)."""

from __future__ import annotations

import math

import pytest

from proxy.bench.held import format_held, run_held

pytestmark = pytest.mark.slow


def test_a_small_held_run_gives_every_figure():
    held = run_held(calls=10, clients=2, live=20)
    assert (held["sync_calls"], held["held_calls"], held["live_held"]) == (10, 10, 20)
    figures = (
        "sync_off_cpu_ms_per_call",
        "sync_off_wall_ms_per_round",
        "sync_wall_ms_per_round",
        "sync_cpu_ms_per_call",
        "held_cpu_ms_per_call",
        "polls_per_call",
        "bytes_per_held_task",
    )
    for key in figures:
        assert math.isfinite(held[key]) and held[key] > 0, (key, held)
    assert held["polls_per_call"] >= 1  # a 400 ms wait promoted at 200 ms is polled at least once
    text = format_held(held)
    assert "ms proxy CPU per call" in text and "KiB RSS per held task" in text
