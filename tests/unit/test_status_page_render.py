"""The status page's rendering from known data (proxy/observe/page.py): verdicts coloured by
meaning, the chart's scales and window, the matrix by backend."""

from __future__ import annotations

import re
from typing import Any

from proxy.observe.page import _nice_step, plot, plot_window, render

MINUTE = 60_000
NOW = 1_780_000_000_000 - 1_780_000_000_000 % MINUTE + 30_000  # half a minute into a minute


def _timeline(v1: list[int], session: list[int] | None = None, modern: list[int] | None = None) -> dict[str, Any]:
    minutes = 60
    first = NOW // MINUTE - minutes + 1

    def pad(values: list[int] | None) -> list[int]:
        values = values or []
        return [0] * (minutes - len(values)) + values

    return {"start_ms": first * MINUTE, "minutes": minutes, "v1": pad(v1), "v2-session": pad(session), "v2-modern": pad(modern)}


def _data(**changes: Any) -> dict[str, Any]:
    backend = {"name": "old", "transport": "http", "dialect": "v1", "pinned": False, "protocol_versions": ["2025-11-25"],
               "health": "up", "down_reason": None, "last_probe_ms": NOW, "dialect_since_ms": NOW, "live_tasks": 0,
               "requests_last_minute": 0, "errors_last_minute": 0, "requests_last_hour": 0, "errors_last_hour": 0,
               "upstream_latency_ms": {"samples": 0, "p50": None, "p90": None, "p99": None}, "weight": 1, "new_work_share": 1.0,
               "drain": None, "remaining": {"sessions": 0, "requests": 0, "tasks": 0}}  # fmt: skip
    data = {"now_ms": NOW, "started_ms": NOW - 3 * 3_600_000, "backends": [backend],
            "matrix": {"last_hour": [], "last_day": []}, "matrix_by_backend": {"last_hour": [], "last_day": []},
            "clients": [], "v1_clients": [], "last_v1_ms": None, "timeline": _timeline([]), "recent_errors": []}  # fmt: skip
    data.update(changes)
    return data


def _verdicts(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<div class="verdict (\w+)">([^<]*)</div>', html)


def test_nice_steps_are_one_two_or_five_times_a_power_of_ten():
    assert [_nice_step(top) for top in (1, 3, 4, 7, 9, 17, 40, 123, 999, 4500)] == [1, 1, 1, 2, 5, 5, 10, 50, 500, 2000]


def test_the_window_is_the_time_since_the_start_at_least_ten_minutes_at_most_the_hour():
    timeline = _timeline([])
    end = timeline["start_ms"] + 60 * MINUTE
    assert [plot_window(timeline, end - ago) for ago in (0, 3 * MINUTE, 25 * MINUTE + 1, 59 * MINUTE, 5 * 3_600_000)] == [
        10,
        10,
        26,
        59,
        60,
    ]


def test_the_chart_has_round_ticks_a_utc_time_axis_and_lines_told_apart():
    svg = plot(_timeline([3, 0, 7], modern=[0, 12, 1]), NOW - 3 * 3_600_000)
    assert re.findall(r'<text class="y-tick"[^>]*>(\d+)</text>', svg) == ["0", "5", "10", "15"]
    labels = re.findall(r'<text class="x-tick"[^>]*>(\d\d:\d\d)</text>', svg)
    assert len(labels) == 6 and all(label.endswith("0") for label in labels)  # one every 10 minutes of the hour
    assert re.findall(r'<text class="legend"[^>]*>([^<]+)</text>', svg) == ["v1 (10)", "v2-session (0)", "v2-modern (13)"]
    assert len(re.findall(r"<circle ", svg)) == 4  # a dot on each minute with requests: 3, 7, 12, 1
    assert "last 60 min" in svg


def test_fresh_traffic_is_drawn_over_the_minutes_since_the_start():
    svg = plot(_timeline([5, 2]), NOW - 4 * MINUTE)
    assert "last 10 min" in svg
    assert len(re.findall(r'<text class="x-tick"[^>]*>\d\d:\d\d</text>', svg)) == 5  # every 2 minutes


def test_verdicts_are_coloured_by_meaning():
    done = render(_data(backends=[{**_data()["backends"][0], "dialect": "v2-modern"}]), 10)
    assert _verdicts(done) == [
        ("clear", "No v1 client has spoken for 24 hours (last: never)."),
        ("clear", "v1 backends: none."),
        ("clear", "Translated requests in the last day: 0."),
    ]
    down = {**_data()["backends"][0], "health": "down", "down_reason": "connection refused"}
    row = {"client_dialect": "v1", "backend_dialect": "v2-modern", "mode": "translated", "requests": 3, "errors": 0}
    under_way = render(_data(backends=[down], last_v1_ms=NOW - 5_000, matrix={"last_hour": [row], "last_day": [row]}), 10)
    assert [cls for cls, _ in _verdicts(under_way)] == ["alarm", "info", "info", "info"]
    assert _verdicts(under_way)[0] == ("alarm", "Backend old is down: connection refused.")
    assert _verdicts(under_way)[3] == ("info", "Translated requests in the last day: 3.")


def test_held_tasks_show_under_the_live_tasks_once_there_were_any():
    quiet = _data()
    assert "held:" not in render(quiet, 10)
    busy = _data()
    busy["backends"][0]["held_tasks"] = {"now": 2, "promoted": 7, "ended": {"completed": 4, "cancelled": 1}}
    assert "held: 2 now, 7 in all (1 cancelled, 4 completed)" in render(busy, 10)
