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
               "drain": None, "remaining": {"sessions": 0, "requests": 0, "tasks": 0, "held": 0}}  # fmt: skip
    data = {"now_ms": NOW, "started_ms": NOW - 3 * 3_600_000, "backends": [backend],
            "matrix": {"last_hour": [], "last_day": []}, "matrix_by_backend": {"last_hour": [], "last_day": []},
            "clients": [], "v1_clients": [], "last_v1_ms": None, "timeline": _timeline([]), "recent_errors": [],
            "counting": {"covers": "proxy", "store": "sqlite: /state/tasks.sqlite3", "since_ms": NOW - 2 * 86_400_000,
                         "replica": "host:8080", "replicas": [], "late": []}}  # fmt: skip
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
        ("clear", "Clients leaning on the proxy: none."),
    ]
    down = {**_data()["backends"][0], "health": "down", "down_reason": "connection refused"}
    row = {"client_dialect": "v1", "backend_dialect": "v2-modern", "mode": "translated", "requests": 3, "errors": 0}
    under_way = render(
        _data(backends=[down], last_v1_ms=NOW - 5_000, matrix={"last_hour": [row], "last_day": [row]}, leaning=[LEANING]), 10
    )
    assert [cls for cls, _ in _verdicts(under_way)] == ["alarm", "info", "info", "info", "info"]
    assert _verdicts(under_way)[0] == ("alarm", "Backend old is down: connection refused.")
    assert _verdicts(under_way)[3] == ("info", "Translated requests in the last day: 3.")
    assert _verdicts(under_way)[4] == ("info", "Clients leaning on the proxy: 1 (curl-walk 1.0).")


def test_silence_is_no_verdict_before_a_day_of_counting():
    """Issue 23: 10 s after a restart the page said "No v1 client has spoken for 24 hours (last:
    never)"; counted for less than a day, it says so instead."""
    fresh = _data(backends=[{**_data()["backends"][0], "dialect": "v2-modern"}])
    fresh["counting"] = {**fresh["counting"], "since_ms": NOW - 10_000}
    assert _verdicts(render(fresh, 10))[0] == (
        "info",
        "No v1 client seen since counting began 2026-05-28 20:26:20 UTC (10 s ago): less than 24 hours.",
    )


def test_the_replicas_and_the_fleet_total_are_shown():
    data = _data()
    replica = {"processes": 2, "since_ms": NOW - 3_600_000, "last_flush_ms": NOW, "requests_last_hour": 5, "errors_last_hour": 1,
               "requests_last_day": 7, "v1_requests_last_day": 3}  # fmt: skip
    data["counting"] = {"covers": "fleet", "store": "redis://127.0.0.1:6379/0", "since_ms": NOW - 3_600_000, "replica": "a:1",
                        "late": [], "replicas": [{**replica, "name": "a:1", "last_v1_ms": NOW - 60_000},
                                                 {**replica, "name": "b:2", "processes": 1, "last_v1_ms": None},
                                                 {"name": "c:3", "processes": 0, "since_ms": NOW - 9 * 86_400_000,
                                                  "last_flush_ms": NOW - 3 * 86_400_000, "requests_last_hour": 0, "errors_last_hour": 0,
                                                  "requests_last_day": 0, "v1_requests_last_day": 0, "last_v1_ms": None}]}  # fmt: skip
    html = render(data, 10)
    rows = re.findall(r"<tr>(.*?)</tr>", html.split('id="replicas"')[1].split("</table>")[0])
    cells = [c for c in (re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows) if c]
    assert [(c[0], c[1], c[4], c[5], c[6]) for c in cells] == [
        ("a:1 (this one)", "2", "5 / 7", "1", "3"),
        ("b:2", "1", "5 / 7", "1", "3"),
        ('<span class="muted">1 more, silent for over a day (status.json)</span>', "0", "", "", ""),
        ("<b>fleet total</b>", "3", "10 / 14", "2", "6"),
    ]
    assert "Counts cover the fleet (3 replicas)" in html  # the silent one's clients are still counted


LEANING = {
    "dialect": "v2-modern",
    "name": "curl-walk",
    "version": "1.0",
    "requests": 3,
    "leaning": 2,
    "repairs": {"mcp-method": 2, "mcp-name": 1},
    "last_leaning_ms": NOW - 5_000,
}


def _rows(html: str, table_id: str) -> list[list[str]]:
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S)
    assert table is not None, table_id
    return [re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row) for row in re.findall(r"<tr>(.*?)</tr>", table.group(1))]


def test_failures_leaning_clients_and_recent_errors_are_tables_of_their_own():
    failure = {
        "backend": "old",
        "client_dialect": "v1",
        "backend_dialect": "v1",
        "mode": "relayed",
        "reason": "session_lost",
        "by": "backend",
        "count": 4,
    }
    client = {
        "dialect": "v1",
        "name": "legacy-cli",
        "version": "1.2.0",
        "requests": 9,
        "first_seen_ms": NOW - 60_000,
        "last_seen_ms": NOW - 1_000,
        "backends": ["old"],
        "errors": 5,
        "failures": {"session_lost": 4, "task_unknown": 1},
        "leaning": 0,
        "repairs": {},
    }
    error = {
        "at_ms": NOW - 2_000,
        "backend": "old",
        "client_dialect": "v1",
        "backend_dialect": "v1",
        "client": "legacy-cli",
        "client_version": "1.2.0",
        "method": "tasks/get",
        "code": "http_404",
        "reason": "session_lost",
        "by": "backend",
        "detail": None,
    }
    html = render(
        _data(
            failures={"last_hour": [failure], "last_day": [failure]},
            clients=[client],
            v1_clients=[client],
            leaning=[LEANING],
            recent_errors=[error],
            reasons={"session_lost": "the session is gone"},
            repairs={"mcp-method": "no Mcp-Method"},
        ),
        10,
    )
    assert _rows(html, "failures-hour") == [
        ["backend", "client dialect", "backend dialect", "how", "reason", "by", "count"],
        ["old", "v1", "v1", "relayed", "session_lost", "backend", "4"],
    ]
    assert _rows(html, "clients")[1][:6] == ["v1", "legacy-cli", "1.2.0", "9", "5", "session_lost 4, task_unknown 1"]
    assert _rows(html, "leaning")[1][:6] == ["v2-modern", "curl-walk", "1.0", "3", "2", "mcp-method 2, mcp-name 1"]
    assert _rows(html, "errors")[1][1:] == [
        "—",
        "old",
        "legacy-cli 1.2.0",
        "v1",
        "v1",
        "tasks/get",
        "http_404",
        "session_lost",
        "backend",
        "—",
    ]
    assert "<dt><code>session_lost</code></dt><dd>the session is gone</dd>" in html


def test_held_tasks_show_under_the_live_tasks_once_there_were_any():
    quiet = _data()
    assert "held:" not in render(quiet, 10)
    busy = _data()
    busy["backends"][0]["held_tasks"] = {"now": 2, "promoted": 7, "ended": {"completed": 4, "cancelled": 1}}
    assert "held: 2 now, 7 in all (1 cancelled, 4 completed)" in render(busy, 10)
