"""`mcp-tasks-proxy status URL`: a running proxy's `/status.json` as terminal tables (or the JSON).
URL is the proxy's address (`http://127.0.0.1:8080`), its MCP endpoint, or `/status.json` itself."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from ..printable import escaped, json_text
from .page import COVERS, covers, recent_replicas, when
from .shadow_page import counted_scope


def proxy_url(url: str, path: str) -> str:
    """`path` on the proxy at `url` (its address, its MCP endpoint or any of its URLs)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def status_url(url: str) -> str:
    """The `/status.json` of the proxy at `url`."""
    return proxy_url(url, "/status.json")


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell; "(none)" for no rows. Every cell is shown with its
    control characters escaped (`proxy/printable.py`): names and reasons come from clients and backends."""
    if not rows:
        return "  (none)"
    rows = [[escaped(str(cell)) for cell in row] for row in rows]
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in [headers, *rows]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _drain(backend: dict[str, Any]) -> str:
    """"-", "drained", or "draining: N sessions, N requests, N tasks, N held" (what is still bound to it)."""
    if backend["drain"] != "draining":
        return backend["drain"] or "-"
    left = backend["remaining"]
    return f'draining: {left["sessions"]} sessions, {left["requests"]} requests, {left["tasks"]} tasks, {left.get("held", 0)} held'


def _counting(data: dict[str, Any]) -> list[str]:
    """Since when and over what the counts go, and each replica's own with the fleet's total."""
    counting, now = data["counting"], data["now_ms"]
    out = [f"Counts cover {covers(counting)}: {COVERS[counting['covers']]}; counted since {when(counting['since_ms'], now)}. "
           f"Store: {counting['store']}."]
    if counting.get("error"):
        out.append(f"  {escaped(str(counting['error']))}")
    if counting.get("late"):
        out.append(f"  not flushed in time for this read: {escaped(', '.join(counting['late']))}")
    replicas = counting["replicas"]
    if counting["covers"] == "fleet" or len(replicas) > 1:
        rows = [[r["name"] + (" *" if r["name"] == counting["replica"] else ""), str(r["processes"]), when(r["since_ms"], now),
                 str(r["requests_last_hour"]), str(r["requests_last_day"]), str(r["errors_last_hour"]), str(r["v1_requests_last_day"]),
                 when(r["last_v1_ms"], now)] for r in recent_replicas(replicas, now)]
        if len(rows) < len(replicas):
            rows.append([f"({len(replicas) - len(rows)} more, silent for over a day: --json)", "0", "", "", "", "", "", ""])
        last_v1 = max((r["last_v1_ms"] for r in replicas if r["last_v1_ms"] is not None), default=None)
        total = "fleet total" if counting["covers"] == "fleet" else "total"
        rows.append([total, str(sum(r["processes"] for r in replicas)), when(counting["since_ms"], now),
                     *(str(sum(r[k] for r in replicas)) for k in ("requests_last_hour", "requests_last_day", "errors_last_hour",
                                                                   "v1_requests_last_day")), when(last_v1, now)])
        out += ["", "Replicas (* this one)", table(["replica", "processes", "since", "req/h", "req/day", "err/h", "v1 req/day", "last v1"],
                                                   rows)]
    return out + [""]


def render(data: dict[str, Any]) -> str:
    now = data["now_ms"]
    scope = covers(data["counting"])
    restarted = data.get("restarted")
    head = [f"version {data.get('version', '?')}, up since {when(data.get('started_ms'), now)}"
            + (f", restarted from pid {restarted['from_pid']} {when(restarted['at_ms'], now)}" if restarted else "")]
    out = [*head, *_counting(data), "Backends" if scope == "this process" else f"Backends (requests and errors: {scope}; the rest: this process)",
           table(
        ["backend", "transport", "dialect", "versions", "health", "dialect since", "live tasks", "req/h", "err/h", "refused/h", "p50 ms",
         "p99 ms", "weight (new work)", "drain"],
        [[b["name"], b["transport"], b["dialect"], ",".join(b["protocol_versions"]) or "-",
          b["health"] + (f" ({b['down_reason']})" if b["down_reason"] else ""), when(b["dialect_since_ms"], now), str(b["live_tasks"]),
          str(b["requests_last_hour"]), str(b["errors_last_hour"]), str(b.get("refusals_last_hour", "-")),
          str(b["upstream_latency_ms"]["p50"] or "-"),
          str(b["upstream_latency_ms"]["p99"] or "-"), f'{b["weight"]} ({round(b["new_work_share"] * 100)}%)', _drain(b)]
         for b in data["backends"]])]
    for label, key in (("last hour", "last_hour"), ("last day", "last_day")):
        out += ["", f"Migration matrix, {label}", table(["client", "backend", "how", "requests", "errors"],
                [[r["client_dialect"], r["backend_dialect"], r["mode"], str(r["requests"]), str(r["errors"])] for r in data["matrix"][key]])]
    out += ["", "Migration matrix by backend, last hour", table(["backend", "client", "backend dialect", "how", "requests", "errors"],
            [[r["backend"], r["client_dialect"], r["backend_dialect"], r["mode"], str(r["requests"]), str(r["errors"])]
             for r in data["matrix_by_backend"]["last_hour"]])]
    out += ["", f"Clients still on v1 (last v1 request: {when(data['last_v1_ms'], now)})",
            table(["client", "version", "requests", "last seen", "backends"],
                  [[r["name"], r["version"] or "-", str(r["requests"]), when(r["last_seen_ms"], now), ",".join(r["backends"])]
                   for r in data["v1_clients"]])]
    out += ["", "All clients", table(["dialect", "client", "version", "requests", "errors", "last seen", "backends"],
            [[r["dialect"], r["name"], r["version"] or "-", str(r["requests"]), str(r.get("errors", "-")), when(r["last_seen_ms"], now),
              ",".join(r["backends"])] for r in data["clients"]])]
    out += ["", "Clients leaning on the proxy", table(["dialect", "client", "version", "requests", "repaired", "repairs"],
            [[r["dialect"], r["name"], r["version"] or "-", str(r["requests"]), str(r["leaning"]),
              ",".join(f"{code}={n}" for code, n in r["repairs"].items())] for r in data.get("leaning", [])])]
    out += ["", f"Tools, last {data.get('tools_window_minutes', 60)} minutes (tool calls as clients saw them; verdict against the first backend)",
            table(["tool", "backend", "calls", "ok", "tool err", "proto err", "timeout", "refused", "p50 ms", "p95 ms", "verdict"],
                  [[t["tool"], r["backend"], str(r["calls"]), str(r["ok"]), str(r["tool_error"]), str(r["protocol_error"]), str(r["timeout"]),
                    str(r["refused"]), str(r["p50_ms"] or "-"), str(r["p95_ms"] or "-"),
                    "-" if r["verdict"] is None else f'{r["verdict"]["outcome"].replace("_", " ")} against {r["verdict"]["against"]}']
                   for t in data.get("tools") or () for r in t["backends"]])]
    out += [escaped(f"  {t['tool']} on {r['backend']}: {r['verdict']['reason']}") for t in data.get("tools") or () for r in t["backends"]
            if r["verdict"] is not None and r["verdict"]["outcome"] == "worse"]
    out += ["", "Failures by reason, last hour", table(["backend", "client", "backend dialect", "how", "reason", "by", "count"],
            [[r["backend"], r["client_dialect"], r["backend_dialect"], r["mode"], r["reason"], r["by"], str(r["count"])]
             for r in data.get("failures", {}).get("last_hour", [])])]
    out += ["", "Recent refusals and upstream errors",
            table(["when", "replica", "backend", "client", "dialect", "method", "code", "reason", "by"],
                  [[when(e["at_ms"], now), e.get("replica") or "-", e["backend"], f'{e.get("client", "-")} {e.get("client_version", "")}'.strip(),
                    e["client_dialect"], e["method"] or "-", e["code"], e.get("reason") or "-", e.get("by", "-")]
                   for e in data["recent_errors"][:20]])]
    out += ["", "Reloads (the process that answered)", table(["when", "pid", "verdict", "what changed, or why refused"],
            [[when(r["at_ms"], now), str(r["pid"]), "applied" if r["applied"] else "refused",
              "; ".join(r["changes"]) or "no backend changed" if r["applied"] else r.get("reason") or "-"] for r in data.get("reloads") or ()])]
    rollout = data.get("rollout")
    if rollout is not None:
        out += ["", f"Rollout {rollout['from']} -> {rollout['to']}: {rollout['state'].replace('_', ' ')}, step {rollout['step'] + 1} of "
                f"{len(rollout['steps'])} ({rollout['percent']:g} % of new work on {rollout['to']})"]
        if rollout.get("gates"):
            out.append(f"  last check: {rollout['gates']['outcome']}: {rollout['gates']['reason']}")
        out += [f"  {when(e['at_ms'], now)}: {e['event']} at {e['percent']:g} %: {e['reason']}" for e in rollout["history"][-10:]]
    for shadow in data.get("shadow") or ():
        out += ["", f"Shadow comparison: {shadow['backend']} shadows {shadow['shadow_of']} ({shadow['percent']:g}%; {counted_scope(shadow)})",
                table(["method", "tool", "match", "differ", "cand. err", "prim. err", "timeout", "dropped", "too large", "match rate"],
                      [[r["method"], r["tool"] or "-", *(str(r.get(k, 0)) for k in ("match", "differ", "candidate_error", "primary_error",
                                                                                      "timeout", "dropped", "too_large")),
                        "-" if r["match_rate"] is None else f"{r['match_rate'] * 100:.1f}%"] for r in shadow["rows"]])]
        out += [escaped(f"  {d['method']} {d['tool'] or ''}: {line}") for d in shadow["last_differences"][:5]
                for line in d["diff"].split("\n")]
    return "\n".join(out)


class ProxyRefused(Exception):
    """An HTTP error answer of the proxy: its `code` and `reason` (the proxy's own words when it gave them)."""

    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code = code
        self.reason = reason


def ask_proxy(url: str, token: str | None, body: dict[str, Any] | None = None, timeout_s: float = 10) -> Any:
    """The JSON answer of the proxy's `url` (GET, or POST of `body`), with `token` (else
    `$MCP_TASKS_PROXY_STATUS_TOKEN`) as the status token: the `status` and `rollout` commands.
    Raises `ProxyRefused` for an HTTP error, `OSError` or `ValueError` when it cannot be read."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="GET" if data is None else "POST", headers={"Content-Type": "application/json"})
    token = token or os.environ.get("MCP_TASKS_PROXY_STATUS_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:  # the proxy's own reason (a 403 says what would be served)
        try:
            reason = json.load(exc).get("error", exc.reason)
        except (ValueError, AttributeError):
            reason = exc.reason
        raise ProxyRefused(exc.code, str(reason)) from None


def run(args: argparse.Namespace) -> int:
    """Fetch and print; exit 1 when the proxy cannot be read (403 without the token from elsewhere)."""
    try:
        data = ask_proxy(status_url(args.url), args.token)
    except ProxyRefused as exc:
        print(escaped(f"mcp-tasks-proxy status: {status_url(args.url)}: HTTP {exc.code}: {exc.reason}"), file=sys.stderr)
        return 1
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(escaped(f"mcp-tasks-proxy status: cannot read {status_url(args.url)}: {exc}"), file=sys.stderr)
        return 1
    # Control characters shown escaped: the JSON's as JSON escapes (the same value), the tables' as \xNN.
    print(json_text(json.dumps(data, indent=2)) if args.json else escaped(render(data), lines=True))
    return 0


def add_parser(commands: Any) -> None:
    status = commands.add_parser("status", help="print a running proxy's status page as tables (backends, migration matrix, v1 clients)")
    status.add_argument("url", metavar="URL", help="the proxy, e.g. http://127.0.0.1:8080")
    status.add_argument("--json", action="store_true", help="print the JSON of /status.json")
    status.add_argument("--token", help="the proxy's status_token (default: $MCP_TASKS_PROXY_STATUS_TOKEN)")
    status.set_defaults(run=run)
