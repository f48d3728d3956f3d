"""The status page as one HTML document: no script, no external asset, inline CSS and an inline
SVG plot of requests per minute by client dialect; it reloads itself (`<meta http-equiv="refresh">`).
Input: the data of `proxy.observe.status.snapshot`."""

from __future__ import annotations

import datetime
from html import escape
from typing import Any

COLOURS = {"v1": "#c0392b", "v2-session": "#d68910", "v2-modern": "#1e8449"}
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;margin:.2em 0}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
.up{color:#1e8449;font-weight:bold}.down{color:#c0392b;font-weight:bold}.unknown{color:#777}
.verdict{padding:.5em .8em;border-radius:4px;display:inline-block;margin:.3em 0}
.clear{background:#e8f6ec;border:1px solid #1e8449}.busy{background:#fdecea;border:1px solid #c0392b}
.muted{color:#666}svg text{font:11px system-ui,sans-serif}
"""


def when(ms: int | None, now_ms: int) -> str:
    """`2026-05-01 12:00:00 UTC (3 min ago)`, or "never"."""
    if ms is None:
        return "never"
    stamp = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{stamp} ({ago(now_ms - ms)})"


def ago(ms: int) -> str:
    seconds = max(0, ms // 1000)
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    if seconds < 172_800:
        return f"{seconds // 3600} h ago"
    return f"{seconds // 86_400} days ago"


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset(), table_id: str = "") -> str:  # type: ignore[assignment]
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row)) + "</tr>"
                   for row in rows)
    if not rows:
        body = f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>'
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _latency(latency: dict[str, Any]) -> str:
    if not latency["samples"]:
        return "—"
    return f"{latency['p50']} / {latency['p90']} / {latency['p99']} ({latency['samples']})"


def _backends(data: dict[str, Any]) -> str:
    now = data["now_ms"]
    rows = []
    for b in data["backends"]:
        health = f'<span class="{b["health"]}">{escape(b["health"])}</span>'
        if b["down_reason"]:
            health += f'<br><span class="muted">{escape(b["down_reason"])}</span>'
        dialect = escape(b["dialect"]) + (" (pinned)" if b["pinned"] else "")
        left = b["remaining"]
        drain = escape(b["drain"] or "—") + (f'<br><span class="muted">{left["sessions"]} sessions, {left["requests"]} requests, '
                                              f'{left["tasks"]} tasks followed</span>' if b["drain"] == "draining" else "")
        rows.append([escape(b["name"]), escape(b["transport"]), dialect, escape(", ".join(b["protocol_versions"]) or "—"), health,
                     escape(when(b["last_probe_ms"], now)), escape(when(b["dialect_since_ms"], now)), str(b["live_tasks"]),
                     f'{b["requests_last_minute"]} / {b["requests_last_hour"]}', f'{b["errors_last_minute"]} / {b["errors_last_hour"]}',
                     escape(_latency(b["upstream_latency_ms"])), f'{b["weight"]} ({round(b["new_work_share"] * 100)}%)', drain])
    headers = ["backend", "transport", "dialect", "protocol versions", "health", "last probe answered", "dialect since",
               "live tasks", "requests (last min / hour)", "errors (last min / hour)", "upstream ms p50 / p90 / p99 (samples)",
               "weight (share of new sessions and calls)", "drain"]
    return _table(headers, rows, {7, 8, 9}, "backends")


def _matrix(rows: list[dict[str, Any]], table_id: str) -> str:
    return _table(["client dialect", "backend dialect", "how", "requests", "errors"],
                  [[escape(r["client_dialect"]), escape(r["backend_dialect"]), escape(r["mode"]), str(r["requests"]), str(r["errors"])]
                   for r in rows], {3, 4}, table_id)


def _clients(rows: list[dict[str, Any]], now: int, table_id: str, with_dialect: bool) -> str:
    headers = (["dialect"] if with_dialect else []) + ["client", "version", "requests", "last seen", "backends used"]
    body = [([escape(r["dialect"])] if with_dialect else []) + [escape(r["name"]), escape(r["version"] or "—"), str(r["requests"]),
            escape(when(r["last_seen_ms"], now)), escape(", ".join(r["backends"]))] for r in rows]
    return _table(headers, body, {3 if with_dialect else 2}, table_id)


def _verdict(data: dict[str, Any]) -> str:
    last = data["last_v1_ms"]
    now = data["now_ms"]
    v1_day = sum(r["requests"] for r in data["matrix"]["last_day"] if r["client_dialect"] == "v1")
    v1_backends = [b["name"] for b in data["backends"] if b["dialect"] == "v1"]
    translated = sum(r["requests"] for r in data["matrix"]["last_day"] if r["mode"] == "translated")
    lines = []
    if last is None or now - last >= 86_400_000:
        lines.append(f'<div class="verdict clear">No v1 client has spoken for 24 hours (last: {escape(when(last, now))}).</div>')
    else:
        lines.append(f'<div class="verdict busy">v1 clients are still here: {v1_day} requests in the last day, '
                     f'last {escape(when(last, now))}.</div>')
    lines.append(f'<div class="verdict {"clear" if not v1_backends else "busy"}">v1 backends: '
                 f'{escape(", ".join(v1_backends)) if v1_backends else "none"}.</div>')
    lines.append(f'<div class="verdict {"clear" if not translated else "busy"}">Translated requests in the last day: {translated}.</div>')
    return "<br>".join(lines)


def plot(timeline: dict[str, Any], width: int = 720, height: int = 160) -> str:
    """Requests per minute by client dialect, one polyline each, as inline SVG."""
    minutes = timeline["minutes"]
    series = {d: timeline[d] for d in COLOURS}
    top = max([1, *(max(values) for values in series.values())])
    left, bottom, right = 40, 20, 110
    inner_w, inner_h = width - left - right, height - bottom - 10

    def x(i: int) -> float:
        return left + inner_w * i / max(1, minutes - 1)

    def y(v: int) -> float:
        return 10 + inner_h * (1 - v / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="requests per minute by client dialect, last {minutes} minutes">',
             f'<rect x="{left}" y="10" width="{inner_w}" height="{inner_h}" fill="#fafafa" stroke="#ccc"/>',
             f'<text x="{left - 4}" y="14" text-anchor="end">{top}</text>',
             f'<text x="{left - 4}" y="{10 + inner_h}" text-anchor="end">0</text>',
             f'<text x="{left}" y="{height - 4}">-{minutes} min</text>',
             f'<text x="{left + inner_w}" y="{height - 4}" text-anchor="end">now</text>']
    for n, (dialect, values) in enumerate(series.items()):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        colour = COLOURS[dialect]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>')
        parts.append(f'<rect x="{left + inner_w + 10}" y="{14 + n * 18}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{left + inner_w + 24}" y="{23 + n * 18}">{dialect} ({sum(values)})</text>')
    parts.append("</svg>")
    return "".join(parts)


def render(data: dict[str, Any], refresh_s: int) -> str:
    """The whole page."""
    now = data["now_ms"]
    errors = _table(["when", "backend", "client dialect", "method", "code", "reason"],
                    [[escape(when(e["at_ms"], now)), escape(e["backend"]), escape(e["client_dialect"]), escape(e["method"] or "—"),
                      escape(e["code"]), escape(e["reason"] or "the backend's answer")] for e in data["recent_errors"]],
                    table_id="errors")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{refresh_s}">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>mcp-tasks-proxy status</title>
<style>{STYLE}</style></head><body>
<h1>mcp-tasks-proxy status</h1>
<p class="muted">{escape(when(now, now).split(" (")[0])} · up since {escape(when(data["started_ms"], now))} ·
reloads every {refresh_s} s · <a href="status.json">status.json</a></p>
{_verdict(data)}
<h2>Backends</h2>
{_backends(data)}
<h2>Requests per minute by client dialect (last hour)</h2>
{plot(data["timeline"])}
<h2>Migration matrix</h2>
<p>Last hour</p>{_matrix(data["matrix"]["last_hour"], "matrix-hour")}
<p>Last day</p>{_matrix(data["matrix"]["last_day"], "matrix-day")}
<h2>Clients still on v1</h2>
{_clients(data["v1_clients"], now, "v1-clients", False)}
<h2>All clients</h2>
{_clients(data["clients"], now, "clients", True)}
<h2>Recent refusals and upstream errors</h2>
{errors}
</body></html>
"""
