"""The status page as one HTML document: no script, no external asset, inline CSS and an inline
SVG plot of requests per minute by client dialect; it reloads itself (`<meta http-equiv="refresh">`).
Input: the data of `proxy.observe.status.snapshot`."""

from __future__ import annotations

import datetime
from html import escape
from typing import Any

from .shadow_page import section as shadow_section

COLOURS = {"v1": "#c0392b", "v2-session": "#b9770e", "v2-modern": "#1e8449"}
DASHES = {"v1": "", "v2-session": "7 4", "v2-modern": "2 3"}
"""Each dialect's line has its own dash pattern too, so the lines are told apart without colour."""
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;margin:.2em 0}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
.up{color:#1e8449;font-weight:bold}.down{color:#c0392b;font-weight:bold}.unknown{color:#777}
.verdict{padding:.5em .8em;border-radius:4px;display:inline-block;margin:.3em 0}
.clear{background:#e8f6ec;border:1px solid #1e8449}.info{background:#eaf2fb;border:1px solid #2e6da4}
.alarm{background:#fdecea;border:1px solid #c0392b;font-weight:bold}
.muted{color:#666}svg text{font:11px system-ui,sans-serif}
dl.codes{color:#555;font-size:.92em;margin:.4em 0}dl.codes dd{margin:0 0 .2em 1.5em}
"""
VERDICTS = ("clear", "info", "alarm")
"""The verdicts' classes by meaning: done (green), a migration step still under way (blue,
information), something to act on now (red: a backend down)."""


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


def _held(backend: dict[str, Any]) -> str:
    """Held tasks under the live tasks (docs/behaviour.md §9): open now, promoted in all, ended by outcome."""
    held = backend.get("held_tasks") or {}
    if not held.get("promoted"):
        return ""
    ended = ", ".join(f"{n} {outcome}" for outcome, n in sorted(held["ended"].items())) or "none ended"
    return f'<br><span class="muted">held: {held["now"]} now, {held["promoted"]} in all ({escape(ended)})</span>'


def _backends(data: dict[str, Any]) -> str:
    now = data["now_ms"]
    rows = []
    for b in data["backends"]:
        health = f'<span class="{b["health"]}">{escape(b["health"])}</span>'
        if b["down_reason"]:
            health += f'<br><span class="muted">{escape(b["down_reason"])}</span>'
        dialect = escape(b["dialect"]) + (" (pinned)" if b["pinned"] else "")
        left = b["remaining"]
        counts = (f'{left["sessions"]} sessions, {left["requests"]} requests, {left["tasks"]} tasks followed, '
                  f'{left.get("held", 0)} held calls')
        drain = escape(b["drain"] or "—") + (f'<br><span class="muted">{counts}</span>' if b["drain"] == "draining" else "")
        rows.append([escape(b["name"]), escape(b["transport"]), dialect, escape(", ".join(b["protocol_versions"]) or "—"), health,
                     escape(when(b["last_probe_ms"], now)), escape(when(b["dialect_since_ms"], now)), str(b["live_tasks"]) + _held(b),
                     f'{b["requests_last_minute"]} / {b["requests_last_hour"]}', f'{b["errors_last_minute"]} / {b["errors_last_hour"]}',
                     f'{b.get("refusals_last_minute", 0)} / {b.get("refusals_last_hour", 0)}', escape(_latency(b["upstream_latency_ms"])),
                     f'{b["weight"]} ({round(b["new_work_share"] * 100)}%)', drain])
    headers = ["backend", "transport", "dialect", "protocol versions", "health", "last probe answered", "dialect since",
               "live tasks", "requests (last min / hour)", "backend errors (last min / hour)", "proxy refusals (last min / hour)",
               "upstream ms p50 / p90 / p99 (samples)", "weight (share of new sessions and calls)", "drain"]
    return _table(headers, rows, {7, 8, 9, 10}, "backends")


def _matrix(rows: list[dict[str, Any]], table_id: str) -> str:
    by_backend = bool(rows) and "backend" in rows[0]
    headers = (["backend"] if by_backend else []) + ["client dialect", "backend dialect", "how", "requests", "errors"]
    body = [([escape(r["backend"])] if by_backend else []) + [escape(r["client_dialect"]), escape(r["backend_dialect"]), escape(r["mode"]),
            str(r["requests"]), str(r["errors"])] for r in rows]
    return _table(headers, body, {4, 5} if by_backend else {3, 4}, table_id)


def _counts(counts: dict[str, int]) -> str:
    """`{"session_lost": 2, "task_unknown": 1}` as "session_lost 2, task_unknown 1" ("—": none)."""
    return ", ".join(f"{code} {n}" for code, n in counts.items()) or "—"


def _clients(rows: list[dict[str, Any]], now: int, table_id: str, with_dialect: bool) -> str:
    headers = (["dialect"] if with_dialect else []) + ["client", "version", "requests", "errors", "by reason", "last seen", "backends used"]
    body = [([escape(r["dialect"])] if with_dialect else []) + [escape(r["name"]), escape(r["version"] or "—"), str(r["requests"]),
            str(r.get("errors", 0)), escape(_counts(r.get("failures", {}))), escape(when(r["last_seen_ms"], now)), escape(", ".join(r["backends"]))]
            for r in rows]
    first = 3 if with_dialect else 2
    return _table(headers, body, {first, first + 1}, table_id)


def _leaning(rows: list[dict[str, Any]], now: int) -> str:
    headers = ["dialect", "client", "version", "requests", "requests repaired", "repairs", "last repaired"]
    body = [[escape(r["dialect"]), escape(r["name"]), escape(r["version"] or "—"), str(r["requests"]), str(r["leaning"]),
             escape(_counts(r["repairs"])), escape(when(r["last_leaning_ms"], now))] for r in rows]
    return _table(headers, body, {3, 4}, "leaning")


def _failures(rows: list[dict[str, Any]], table_id: str) -> str:
    headers = ["backend", "client dialect", "backend dialect", "how", "reason", "by", "count"]
    body = [[escape(r["backend"]), escape(r["client_dialect"]), escape(r["backend_dialect"]), escape(r["mode"]), escape(r["reason"]),
             escape(r["by"]), str(r["count"])] for r in rows]
    return _table(headers, body, {6}, table_id)


def _rate(value: float) -> str:
    return f"{value * 100:.1f}%"


def _tools(tools: list[dict[str, Any]]) -> str:
    """Per tool, each backend's calls, outcomes, rates, latency and verdict (`proxy/observe/tool_verdicts.py`)."""
    headers = ["tool", "backend", "calls", "ok", "tool errors", "protocol errors", "timeouts", "refused", "tool-error rate",
               "error rate", "p50 ms", "p95 ms", "verdict"]
    body = []
    for tool in tools:
        for r in tool["backends"]:
            verdict = r["verdict"]
            shown = "—" if verdict is None else f'{verdict["outcome"].replace("_", " ")} against {verdict["against"]}: {verdict["reason"]}'
            cls = ' class="down"' if verdict is not None and verdict["outcome"] == "worse" else ""
            body.append([escape(tool["tool"]), escape(r["backend"]), str(r["calls"]), str(r["ok"]), str(r["tool_error"]),
                         str(r["protocol_error"]), str(r["timeout"]), str(r["refused"]), _rate(r["tool_error_rate"]), _rate(r["error_rate"]),
                         "—" if r["p50_ms"] is None else f'≤ {r["p50_ms"]}', "—" if r["p95_ms"] is None else f'≤ {r["p95_ms"]}',
                         f"<span{cls}>{escape(shown)}</span>"])
    return _table(headers, body, {2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, "tools")


def _codes(codes: dict[str, str]) -> str:
    return '<dl class="codes">' + "".join(f"<dt><code>{escape(code)}</code></dt><dd>{escape(text)}</dd>" for code, text in codes.items()) + "</dl>"


COVERS = {"fleet": "every replica on the shared store, with all their workers", "proxy": "kept in its store across restarts",
          "process": "nothing is kept (store = \"memory\")"}


def covers(counting: dict[str, Any]) -> str:
    """What the counts cover, in words: `fleet (2 replicas) since …`."""
    replicas = counting["replicas"]
    scope = counting["covers"]
    if scope == "fleet":
        scope = f"the fleet ({len(replicas)} replica{'s' if len(replicas) != 1 else ''})"
    elif scope == "proxy":
        scope = "this proxy"
    else:
        scope = "this process"
    return scope


def recent_replicas(replicas: list[dict[str, Any]], now: int) -> list[dict[str, Any]]:
    """The replicas worth a row: with a live process, or that flushed within the last day (a
    replaced pod lingers in the store for 30 days: status.json lists them all)."""
    return [r for r in replicas if r["processes"] or now - r["last_flush_ms"] < 86_400_000]


def _restarted(data: dict[str, Any], now: int) -> str:
    """", restarted from pid N <when>" when this process took over from another (`mcp-tasks-proxy restart`)."""
    restarted = data.get("restarted")
    if not restarted:
        return ""
    return f' (restarted from pid {escape(str(restarted["from_pid"]))} {escape(when(restarted["at_ms"], now))})'


def _counting(data: dict[str, Any]) -> str:
    """Since when, and over what, the page has counted; each replica's own figures."""
    counting, now = data["counting"], data["now_ms"]
    line = (f'<p id="counting">Counts cover {escape(covers(counting))}: {escape(COVERS[counting["covers"]])}; counted since '
            f'{escape(when(counting["since_ms"], now))}. Store: {escape(counting["store"])}.')
    if counting.get("error"):
        line += f' <span class="down">{escape(counting["error"])}</span>'
    if counting.get("late"):
        line += f' <span class="muted">Not flushed in time for this read: {escape(", ".join(counting["late"]))}.</span>'
    line += "</p>"
    if counting["covers"] != "fleet" and len(counting["replicas"]) < 2:  # this proxy alone: the line says it all
        return line
    shown = recent_replicas(counting["replicas"], now)
    rows = [[escape(r["name"]) + (" (this one)" if r["name"] == counting["replica"] else ""), str(r["processes"]),
             escape(when(r["since_ms"], now)), escape(when(r["last_flush_ms"], now)), f'{r["requests_last_hour"]} / {r["requests_last_day"]}',
             str(r["errors_last_hour"]), str(r["v1_requests_last_day"]), escape(when(r["last_v1_ms"], now))] for r in shown]
    if len(shown) < len(counting["replicas"]):
        rows.append([f'<span class="muted">{len(counting["replicas"]) - len(shown)} more, silent for over a day (status.json)</span>',
                     "0", "", "", "", "", "", ""])
    totals = [sum(r[k] for r in counting["replicas"]) for k in ("processes", "requests_last_hour", "requests_last_day", "errors_last_hour",
                                                                   "v1_requests_last_day")]
    last_v1 = max((r["last_v1_ms"] for r in counting["replicas"] if r["last_v1_ms"] is not None), default=None)
    total = "<b>fleet total</b>" if counting["covers"] == "fleet" else "<b>total</b>"
    rows.append([total, str(totals[0]), escape(when(counting["since_ms"], now)), "—", f"{totals[1]} / {totals[2]}",
                 str(totals[3]), str(totals[4]), escape(when(last_v1, now))])
    table = _table(["replica", "live processes", "counting since", "last flush", "requests (last hour / day)", "errors (last hour)",
                    "v1 requests (last day)", "last v1 client"], rows, {1, 4, 5, 6}, "replicas")
    return line + "\n<h2>Replicas</h2>\n" + table


def _verdict(data: dict[str, Any]) -> str:
    """One box per verdict, coloured by meaning (`VERDICTS`): a backend down is an alarm; v1
    clients, v1 backends or translated requests still there are information (the migration is
    under way); none of them is clear."""
    last = data["last_v1_ms"]
    now = data["now_ms"]
    v1_day = sum(r["requests"] for r in data["matrix"]["last_day"] if r["client_dialect"] == "v1")
    v1_backends = [b["name"] for b in data["backends"] if b["dialect"] == "v1"]
    translated = sum(r["requests"] for r in data["matrix"]["last_day"] if r["mode"] == "translated")
    lines = [f'<div class="verdict alarm">Backend {escape(b["name"])} is down: {escape(b["down_reason"] or "not answering")}.</div>'
             for b in data["backends"] if b["health"] == "down"]
    since = data["counting"]["since_ms"]
    if last is None and now - since < 86_400_000:  # not counted for a day yet: silence proves nothing
        lines.append(f'<div class="verdict info">No v1 client seen since counting began {escape(when(since, now))}: '
                     f'less than 24 hours.</div>')
    elif last is None or now - last >= 86_400_000:
        lines.append(f'<div class="verdict clear">No v1 client has spoken for 24 hours (last: {escape(when(last, now))}).</div>')
    else:
        lines.append(f'<div class="verdict info">v1 clients are still here: {v1_day} requests in the last day, '
                     f'last {escape(when(last, now))}.</div>')
    lines.append(f'<div class="verdict {"clear" if not v1_backends else "info"}">v1 backends: '
                 f'{escape(", ".join(v1_backends)) if v1_backends else "none"}.</div>')
    lines.append(f'<div class="verdict {"clear" if not translated else "info"}">Translated requests in the last day: {translated}.</div>')
    leaning = data.get("leaning", [])
    names = ", ".join(f'{r["name"]} {r["version"]}'.strip() for r in leaning[:5]) + (", …" if len(leaning) > 5 else "")
    lines.append(f'<div class="verdict {"clear" if not leaning else "info"}">Clients leaning on the proxy: '
                 f'{f"{len(leaning)} ({escape(names)})" if leaning else "none"}.</div>')
    return "<br>".join(lines)


def _nice_step(top: int, ticks: int = 4) -> int:
    """A step of 1, 2 or 5 × 10^k such that about `ticks` steps reach `top` (≥ 1)."""
    raw = max(1.0, top / ticks)
    magnitude = 10 ** (len(str(int(raw))) - 1)
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)


def plot_window(timeline: dict[str, Any], started_ms: int) -> int:
    """How many of the timeline's last minutes the plot shows: those since the proxy started, at
    least 10 (so fresh traffic is not a spike against "now"), at most the whole timeline."""
    minutes = timeline["minutes"]
    end_ms = timeline["start_ms"] + minutes * 60_000
    since_start = (end_ms - started_ms + 59_999) // 60_000
    return max(1, min(minutes, max(10, since_start)))


def plot(timeline: dict[str, Any], started_ms: int | None = None, width: int = 760, height: int = 190) -> str:
    """Requests per minute by client dialect, one line each (its own colour and dash pattern, a
    dot on every minute with requests), as inline SVG: a y axis with gridlines at round steps, a
    time axis labelled in UTC every 10 minutes (every 2 for a short window), a legend with totals."""
    minutes = timeline["minutes"]
    shown = plot_window(timeline, started_ms) if started_ms is not None else minutes
    first = minutes - shown
    series = {d: timeline[d][first:] for d in COLOURS}
    top_value = max([1, *(max(values) for values in series.values())])
    step = _nice_step(top_value)
    top = -(-top_value // step) * step
    left, bottom, right, above = 46, 34, 150, 10
    inner_w, inner_h = width - left - right, height - bottom - above
    start_ms = timeline["start_ms"] + first * 60_000

    def x(i: int) -> float:
        return left + inner_w * i / max(1, shown - 1)

    def y(v: float) -> float:
        return above + inner_h * (1 - v / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="requests per minute by client dialect, last {shown} minutes">',
             f'<rect x="{left}" y="{above}" width="{inner_w}" height="{inner_h}" fill="#fafafa" stroke="#ccc"/>']
    for value in range(0, top + 1, step):
        parts.append(f'<line x1="{left}" x2="{left + inner_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#e3e3e3"/>')
        parts.append(f'<text class="y-tick" x="{left - 5}" y="{y(value) + 4:.1f}" text-anchor="end">{value}</text>')
    every = 10 if shown > 20 else 2
    for i in range(shown):
        minute_ms = start_ms + i * 60_000
        if (minute_ms // 60_000) % every:
            continue
        label = datetime.datetime.fromtimestamp(minute_ms / 1000, datetime.UTC).strftime("%H:%M")
        parts.append(f'<line x1="{x(i):.1f}" x2="{x(i):.1f}" y1="{above + inner_h}" y2="{above + inner_h + 4}" stroke="#999"/>')
        parts.append(f'<text class="x-tick" x="{x(i):.1f}" y="{above + inner_h + 16}" text-anchor="middle">{label}</text>')
    parts.append(f'<text x="{left + inner_w / 2:.1f}" y="{height - 3}" text-anchor="middle">UTC, one point a minute; '
                 f'last {shown} min</text>')
    parts.append(f'<text x="12" y="{above + inner_h / 2:.1f}" text-anchor="middle" '
                 f'transform="rotate(-90 12 {above + inner_h / 2:.1f})">requests / min</text>')
    for n, (dialect, values) in enumerate(series.items()):
        colour, dash = COLOURS[dialect], DASHES[dialect]
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(f'<polyline class="series" data-dialect="{dialect}" fill="none" stroke="{colour}" stroke-width="2"{dashed} '
                     f'points="{points}"/>')
        parts.extend(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.5" fill="{colour}"/>' for i, v in enumerate(values) if v)
        ly = above + 8 + n * 20
        parts.append(f'<line x1="{left + inner_w + 10}" x2="{left + inner_w + 34}" y1="{ly}" y2="{ly}" stroke="{colour}" '
                     f'stroke-width="2"{dashed}/>')
        parts.append(f'<text class="legend" x="{left + inner_w + 40}" y="{ly + 4}">{dialect} ({sum(values)})</text>')
    parts.append("</svg>")
    return "".join(parts)


def _rollout(rollout: dict[str, Any] | None, now: int) -> str:
    """The rollout the proxy runs (`proxy/rollout/`): its state, step, last check and history; nothing without one."""
    if rollout is None:
        return ""
    cls = {"rolled_back": "alarm", "completed": "clear"}.get(rollout["state"], "info")
    steps = ", ".join(f"{step:g} %" for step in rollout["steps"])
    head = (f'<div class="verdict {cls}" id="rollout-state">Rollout {escape(rollout["from"])} → {escape(rollout["to"])}: '
            f'{escape(rollout["state"].replace("_", " "))}, step {rollout["step"] + 1} of {len(rollout["steps"])} '
            f'({rollout["percent"]:g} % of new work on {escape(rollout["to"])}; steps {steps}).</div>')
    check = rollout.get("gates")
    last = f'<p>Last check: {escape(check["outcome"])}: {escape(check["reason"])}</p>' if check else ""
    rows = [[escape(when(e["at_ms"], now)), escape(e["event"]), f'{e["step"] + 1} ({e["percent"]:g} %)', escape(e["reason"])]
            for e in reversed(rollout["history"])]
    return f'<h2>Rollout</h2>{head}{last}{_table(["when", "event", "step", "figures"], rows, table_id="rollout-history")}'


def _reloads(rows: list[dict[str, Any]], now: int) -> str:
    """This process's last reloads, newest first: applied with what changed, or refused and why."""
    return _table(["when", "pid", "verdict", "what changed, or why refused"],
                  [[escape(when(r["at_ms"], now)), str(r["pid"]), "applied" if r["applied"] else "refused",
                    escape("; ".join(r["changes"]) or "no backend changed") if r["applied"] else escape(r.get("reason") or "—")]
                   for r in rows], table_id="reloads")


def render(data: dict[str, Any], refresh_s: int) -> str:
    """The whole page."""
    now = data["now_ms"]
    errors = _table(["when", "replica", "backend", "client", "client dialect", "backend dialect", "method", "code", "reason", "by",
                     "detail"],
                    [[escape(when(e["at_ms"], now)), escape(e.get("replica") or "—"), escape(e["backend"]),
                      escape(f'{e.get("client", "unknown")} {e.get("client_version", "")}'.strip()),
                      escape(e["client_dialect"]), escape(e.get("backend_dialect", "—")), escape(e["method"] or "—"), escape(e["code"]),
                      escape(e.get("reason") or "—"), escape(e.get("by", "—")), escape(e.get("detail") or "—")] for e in data["recent_errors"]],
                    table_id="errors")
    scope = escape(covers(data["counting"]))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{refresh_s}">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>mcp-tasks-proxy status</title>
<style>{STYLE}</style></head><body>
<h1>mcp-tasks-proxy status</h1>
<p class="muted">{escape(when(now, now).split(" (")[0])} · version {escape(str(data.get("version", "?")))} ·
up since {escape(when(data["started_ms"], now))}{_restarted(data, now)} · reloads every {refresh_s} s · <a href="status.json">status.json</a></p>
{_verdict(data)}
{_rollout(data.get("rollout"), now)}
{_counting(data)}
<h2>Backends</h2>
<p class="muted">Requests and errors: {scope}. Health, live tasks and upstream latency: this process.</p>
{_backends(data)}
<h2>Requests per minute by client dialect ({scope})</h2>
{plot(data["timeline"], data["counting"]["since_ms"])}
<h2>Migration matrix ({scope})</h2>
<p>Last hour</p>{_matrix(data["matrix"]["last_hour"], "matrix-hour")}
<p>Last day</p>{_matrix(data["matrix"]["last_day"], "matrix-day")}
<p>By backend, last hour (a rolling upgrade goes backend by backend)</p>{_matrix(data["matrix_by_backend"]["last_hour"], "matrix-backend-hour")}
<p>By backend, last day</p>{_matrix(data["matrix_by_backend"]["last_day"], "matrix-backend-day")}
<h2>Clients still on v1 ({scope})</h2>
{_clients(data["v1_clients"], now, "v1-clients", False)}
<h2>All clients ({scope})</h2>
{_clients(data["clients"], now, "clients", True)}
<h2>Clients leaning on the proxy ({scope})</h2>
<p class="muted">Requests the proxy made good: pointed straight at a v2 backend, these clients would fail.</p>
{_leaning(data.get("leaning", []), now)}
{_codes(data.get("repairs", {}))}
<h2>Tools, backend beside backend (last {data.get("tools_window_minutes", 60)} minutes; {scope})</h2>
<p class="muted">Every tool call as its client saw it: an answered <code>tools/call</code>, or a task's end. A tool error is a result with
<code>isError</code> (or a v1 task that failed); a newer backend is <b>worse</b> when its error rates are above the first backend's beyond
chance (99 %, at least 20 calls each) or its p95 above twice the first's.</p>
{_tools(data.get("tools") or [])}
<h2>Failures by reason ({scope})</h2>
<p>Last hour</p>{_failures(data.get("failures", {}).get("last_hour", []), "failures-hour")}
<p>Last day</p>{_failures(data.get("failures", {}).get("last_day", []), "failures-day")}
{_codes(data.get("reasons", {}))}
<h2>Recent refusals and upstream errors ({scope})</h2>
{errors}
<h2>Reloads (this process)</h2>
{_reloads(data.get("reloads") or [], now)}
{shadow_section(data.get("shadow") or [], now, _table, when)}
</body></html>
"""
