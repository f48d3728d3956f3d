"""The operator's status page (docs/operations.md "Status page"): v1, v2-modern and v2-session
clients with their own clientInfo through the proxy to a v1 and a v2-modern backend, then
`/status.json` checked count by count, and `/status` rendered by a real headless Chromium."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from browser import dump_dom, screenshot, tables
from session_support import SessionCaller
from support import TASKS_EXT, NamedCaller, running_proxy

from translators.errors import NOT_ISSUED, UNKNOWN_TASK

DOES_NOT_UNSEAL = f"{UNKNOWN_TASK}: {NOT_ISSUED}"

pytestmark = pytest.mark.peers

DOCS = Path(__file__).resolve().parents[2] / "docs"
LEGACY = {"name": "legacy-cli", "version": "1.2.0"}
MODERN_APP = {"name": "modern-app", "version": "3.0.0"}
BRIDGE = {"name": "bridge-agent", "version": "0.9.0"}
CURL = {"name": "curl-walk", "version": "1.0"}


async def _session(http: aiohttp.ClientSession, url: str, info: dict[str, str], *, v2: bool = False) -> SessionCaller:
    caller = SessionCaller(http, url)
    capabilities: dict[str, Any] = {"elicitation": {}}
    if v2:
        capabilities["extensions"] = {TASKS_EXT: {}}
    answer = await caller.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": info})
    assert answer["_status"] == 200, answer
    async with http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=caller.headers()) as sent:
        assert sent.status == 202
    return caller


async def _greet(caller: SessionCaller, name: str) -> None:
    answer = await caller.call("tools/call", {"name": "greet", "arguments": {"name": name}})
    assert answer["result"]["content"] == [{"type": "text", "text": f"Hello, {name}!"}], answer


async def drive(http: aiohttp.ClientSession, url: str) -> None:
    """The traffic both tests read back. New work alternates old, new, old, … (equal weights)."""
    legacy_a = await _session(http, url, LEGACY)  # pick 1: old (v1 client, v1 backend: relayed)
    created = await legacy_a.call(
        "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": "a"}, "task": {"ttl": 60_000}}
    )
    result = await legacy_a.call("tasks/result", {"taskId": created["result"]["task"]["taskId"]})
    assert result["result"]["content"][0]["text"] == "computed a"
    modern = NamedCaller(http, url, MODERN_APP)
    listed = await modern.call("tools/list")  # pick 2: new (relayed)
    assert listed.status == 200
    for name in ("m1", "m2"):  # picks 3 (old: translated) and 4 (new: relayed)
        greeted = await modern.call("tools/call", {"name": "greet", "arguments": {"name": name}})
        assert greeted.result["content"] == [{"type": "text", "text": f"Hello, {name}!"}]
    bridge = await _session(http, url, BRIDGE, v2=True)  # pick 5: old (v2-session client over v1: translated)
    await _greet(bridge, "b")
    legacy_b = await _session(http, url, LEGACY)  # pick 6: new (v1 client over v2-modern: translated)
    await _greet(legacy_b, "l")
    forged = await modern.call("tasks/get", {"taskId": "not-a-task-id"})  # refused; counted on the first backend
    assert (forged.status, forged.error["code"], forged.error["message"]) == (
        400,
        -32602,
        DOES_NOT_UNSEAL,
    )
    # A client like the README's curl without the routing headers: it works only because the proxy
    # adds Mcp-Method and Mcp-Name upstream (pick 7: old, translated; pick 8: new, relayed).
    curl = NamedCaller(http, url, CURL)
    for name in ("c1", "c2"):
        body = json.dumps(curl.body("tools/call", {"name": "greet", "arguments": {"name": name}}))
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        greeted = await curl.raw(body, {**headers, "MCP-Protocol-Version": "2026-07-28"})
        assert greeted.body["result"]["content"] == [{"type": "text", "text": f"Hello, {name}!"}]


def _upstream(reference_v1_server, reference_v2_server) -> list[dict[str, str]]:
    return [{"name": "old", "url": reference_v1_server.url}, {"name": "new", "url": reference_v2_server.url}]


async def test_status_json_counts_every_request_dialect_and_client(reference_v1_server, reference_v2_server, tmp_path):
    async with (
        running_proxy(
            "",
            tmp_path,
            upstream=_upstream(reference_v1_server, reference_v2_server),
            store="memory",
            probe_interval_ms=3_600_000,
        ) as proxy,
        aiohttp.ClientSession() as http,
    ):
        await drive(http, proxy.url)
        async with http.get(proxy.base_url + "/status.json") as response:
            assert (response.status, response.content_type) == (200, "application/json")
            status = await response.json()

    backends = {b["name"]: b for b in status["backends"]}
    assert list(backends) == ["old", "new"]
    for name, dialect, versions, requests, refusals, sessions in (
        ("old", "v1", ["2025-11-25"], 10, 1, 2),  # the relayed v1 session and the translated v2-session one
        ("new", "v2-modern", ["2026-07-28"], 6, 0, 1),  # the translated v1 session
    ):
        b = backends[name]
        latency = b.pop("upstream_latency_ms")
        assert latency["samples"] >= requests - refusals and latency["p50"] <= latency["p90"] <= latency["p99"], latency
        assert b["last_probe_ms"] == b["dialect_since_ms"]  # probed once, at start
        assert status["started_ms"] <= b["last_probe_ms"] <= status["now_ms"]
        assert {k: v for k, v in b.items() if k not in ("last_probe_ms", "dialect_since_ms")} == {
            "name": name,
            "transport": "http",
            "dialect": dialect,
            "pinned": False,
            "protocol_versions": versions,
            "health": "up",
            "down_reason": None,
            "live_tasks": 0,
            "held_tasks": {"now": 0, "promoted": 0, "ended": {}},
            "requests_last_minute": b["requests_last_minute"],
            "errors_last_minute": 0,
            "refusals_last_minute": b["refusals_last_minute"],
            "requests_last_hour": requests,
            "errors_last_hour": 0,  # the forged id is the proxy's refusal, not the backend's error
            "refusals_last_hour": refusals,
            "requests_per_minute": round(requests / 60, 3),
            "errors_per_minute": 0.0,
            "weight": 1,
            "new_work_share": 0.5,
            "drain": None,
            "remaining": {"sessions": sessions, "requests": 0, "tasks": 0, "held": 0},
        }
        assert b["requests_last_minute"] <= requests  # the run may straddle a minute
    matrix = [
        {"client_dialect": "v1", "backend_dialect": "v1", "mode": "relayed", "requests": 4, "errors": 0},
        {"client_dialect": "v1", "backend_dialect": "v2-modern", "mode": "translated", "requests": 3, "errors": 0},
        {"client_dialect": "v2-session", "backend_dialect": "v1", "mode": "translated", "requests": 3, "errors": 0},
        {"client_dialect": "v2-modern", "backend_dialect": "v1", "mode": "translated", "requests": 3, "errors": 1},
        {"client_dialect": "v2-modern", "backend_dialect": "v2-modern", "mode": "relayed", "requests": 3, "errors": 0},
    ]
    assert status["matrix"] == {"last_hour": matrix, "last_day": matrix}
    failures = [
        {
            "backend": "old",
            "client_dialect": "v2-modern",
            "backend_dialect": "v1",
            "mode": "translated",
            "reason": "task_unknown",
            "by": "proxy",
            "count": 1,
        }
    ]
    assert status["failures"] == {"last_hour": failures, "last_day": failures}
    rows = [
        (row["dialect"], row["name"], row["version"], row["requests"], row["backends"], row["errors"], row["failures"])
        for row in status["clients"]
    ]
    assert rows == [  # most recently seen first
        ("v2-modern", "curl-walk", "1.0", 2, ["new", "old"], 0, {}),
        ("v2-modern", "modern-app", "3.0.0", 4, ["new", "old"], 1, {"task_unknown": 1}),
        ("v1", "legacy-cli", "1.2.0", 7, ["new", "old"], 0, {}),
        ("v2-session", "bridge-agent", "0.9.0", 3, ["old"], 0, {}),
    ]
    assert status["v1_clients"] == [status["clients"][2]]
    assert status["last_v1_ms"] == status["clients"][2]["last_seen_ms"]
    # Leaning on the proxy: the curl-like client sent no routing header; the test's own modern
    # caller sends Mcp-Method but not Mcp-Name (its two tools/call and its tasks/get).
    assert [{k: v for k, v in row.items() if k != "last_leaning_ms"} for row in status["leaning"]] == [
        {
            "dialect": "v2-modern",
            "name": "modern-app",
            "version": "3.0.0",
            "requests": 4,
            "leaning": 3,
            "repairs": {"mcp-name": 3},
        },
        {
            "dialect": "v2-modern",
            "name": "curl-walk",
            "version": "1.0",
            "requests": 2,
            "leaning": 2,
            "repairs": {"mcp-method": 2, "mcp-name": 2},
        },
    ]
    assert status["leaning"][1]["last_leaning_ms"] == status["clients"][0]["last_seen_ms"]
    timeline = status["timeline"]
    assert (timeline["minutes"], sum(timeline["v1"]), sum(timeline["v2-session"]), sum(timeline["v2-modern"])) == (60, 7, 3, 6)
    errors = status["recent_errors"]
    assert [{k: v for k, v in e.items() if k != "at_ms"} for e in errors] == [
        {
            "backend": "old",
            "client_dialect": "v2-modern",
            "backend_dialect": "v1",
            "client": "modern-app",
            "client_version": "3.0.0",
            "method": "tasks/get",
            "code": "-32602",
            "reason": "task_unknown",
            "by": "proxy",
            "detail": DOES_NOT_UNSEAL,
        },
    ]
    assert set(status["reasons"]) >= {"session_lost", "task_unknown", "backend_refused", "proxy_refused"}
    assert list(status["repairs"]) == ["mcp-method", "mcp-name", "accept"]


def _counts(cells: list[str], hour: list[int], one_minute: bool) -> list[str]:
    """The expected "last min / hour" cells: the hour's counts `hour`, and the same for the last
    minute when the calls and the page fell in one minute; else each shown minute's count, checked
    to be at most the hour's (the calls before the minute turned are not in it)."""
    if one_minute:
        return [f"{count} / {count}" for count in hour]
    minutes = [int(cell.split(" / ")[0]) for cell in cells]
    assert all(0 <= m <= h for m, h in zip(minutes, hour, strict=True)), (cells, hour)
    return [f"{m} / {h}" for m, h in zip(minutes, hour, strict=True)]


async def test_status_page_in_headless_chromium(reference_v1_server, reference_v2_server, tmp_path):
    async with (
        running_proxy(
            "",
            tmp_path,
            upstream=_upstream(reference_v1_server, reference_v2_server),
            store="memory",
            probe_interval_ms=3_600_000,
        ) as proxy,
        aiohttp.ClientSession() as http,
    ):
        minute = int(time.time() // 60)
        await drive(http, proxy.url)
        async with http.get(proxy.base_url + "/status") as response:
            assert response.status == 200
            served = await response.text()
        dom = await dump_dom(proxy.base_url + "/status")
        one_minute = int(time.time() // 60) == minute  # "last min" is the minute under way: all of it, unless one turned
        png = tmp_path / "status-page.png"
        await screenshot(proxy.base_url + "/status", png)
    assert '<meta http-equiv="refresh" content="10">' in served and "<script" not in served and "<svg" in served
    rendered = tables(dom)
    backends = [[cell for i, cell in enumerate(row) if i not in (5, 6, 11)] for row in rendered["backends"]]
    assert [row[-2:] for row in backends] == [
        ["weight (share of new sessions and calls)", "drain"],
        ["1 (50%)", "—"],
        ["1 (50%)", "—"],
    ]
    backends = [row[:-2] for row in backends]
    assert backends == [
        [
            "backend",
            "transport",
            "dialect",
            "protocol versions",
            "health",
            "live tasks",
            "requests (last min / hour)",
            "backend errors (last min / hour)",
            "proxy refusals (last min / hour)",
        ],
        ["old", "http", "v1", "2025-11-25", "up", "0", *_counts(backends[1][6:9], [10, 0, 1], one_minute)],
        ["new", "http", "v2-modern", "2026-07-28", "up", "0", *_counts(backends[2][6:9], [6, 0, 0], one_minute)],
    ]
    v1_clients = rendered["v1-clients"]
    assert v1_clients[0] == ["client", "version", "requests", "errors", "by reason", "last seen", "backends used"]
    assert [row[:5] + row[6:] for row in v1_clients[1:]] == [["legacy-cli", "1.2.0", "7", "0", "—", "new, old"]]
    assert v1_clients[1][5].endswith("s ago)")
    assert "v1 clients are still here: 7 requests in the last day" in dom
    # Colour by meaning: a migration under way is information (blue), nothing here is an alarm.
    assert re.findall(r'<div class="verdict (\w+)">', dom) == ["info", "info", "info", "info"]
    assert "Clients leaning on the proxy: 2 (modern-app 3.0.0, curl-walk 1.0)." in dom
    leaning = rendered["leaning"]
    assert [row[:6] for row in leaning] == [
        ["dialect", "client", "version", "requests", "requests repaired", "repairs"],
        ["v2-modern", "modern-app", "3.0.0", "4", "3", "mcp-name 3"],
        ["v2-modern", "curl-walk", "1.0", "2", "2", "mcp-method 2, mcp-name 2"],
    ]
    assert rendered["failures-day"] == [
        ["backend", "client dialect", "backend dialect", "how", "reason", "by", "count"],
        ["old", "v2-modern", "v1", "translated", "task_unknown", "proxy", "1"],
    ]
    assert rendered["matrix-backend-hour"] == [
        ["backend", "client dialect", "backend dialect", "how", "requests", "errors"],
        ["old", "v1", "v1", "relayed", "4", "0"],
        ["old", "v2-session", "v1", "translated", "3", "0"],
        ["old", "v2-modern", "v1", "translated", "3", "1"],
        ["new", "v1", "v2-modern", "translated", "3", "0"],
        ["new", "v2-modern", "v2-modern", "relayed", "3", "0"],
    ]
    # The chart: a y scale at round steps, a time axis, lines with their own dash patterns
    # (exact scales for known data: tests/unit/test_status_page_render.py).
    ticks = [int(t) for t in re.findall(r'<text class="y-tick"[^>]*>(\d+)</text>', dom)]
    steps = {b - a for a, b in zip(ticks, ticks[1:], strict=False)}
    assert ticks[0] == 0 and len(steps) == 1 and steps.pop() in (1, 2, 5, 10) and 2 <= len(ticks) <= 6, ticks
    assert len(re.findall(r'<text class="x-tick"[^>]*>\d\d:\d\d</text>', dom)) == 5  # every 2 min of the 10 shown
    lines = re.findall(r'<polyline class="series" data-dialect="([\w-]+)"([^>]*)>', dom)
    assert [(dialect, re.findall(r'stroke-dasharray="([\d ]+)"', attrs)) for dialect, attrs in lines] == [
        ("v1", []),
        ("v2-session", ["7 4"]),
        ("v2-modern", ["2 3"]),
    ]
    assert re.findall(r'<text class="legend"[^>]*>([^<]+)</text>', dom) == ["v1 (7)", "v2-session (3)", "v2-modern (6)"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("MCP_TASKS_PROXY_UPDATE_DOCS") == "1":
        shutil.copyfile(png, DOCS / "status-page.png")


async def test_status_command_prints_the_tables(reference_v1_server, reference_v2_server, tmp_path):
    import asyncio
    import sys

    async with (
        running_proxy(
            "",
            tmp_path,
            upstream=_upstream(reference_v1_server, reference_v2_server),
            store="memory",
            probe_interval_ms=3_600_000,
        ) as proxy,
        aiohttp.ClientSession() as http,
    ):
        await drive(http, proxy.url)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy", "status", proxy.base_url, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await process.communicate()
    assert process.returncode == 0
    lines = out.decode().splitlines()
    assert lines[0].startswith("version 0.1.0, up since ")  # this process: not restarted from another
    assert "restarted" not in lines[0]
    assert lines[1].startswith('Counts cover this process: nothing is kept (store = "memory"); counted since ')
    assert lines[3] == "Backends"
    assert lines[6].split()[:5] == ["old", "http", "v1", "2025-11-25", "up"]
    assert lines[7].split()[:5] == ["new", "http", "v2-modern", "2026-07-28", "up"]
    assert [line.split()[-3:] for line in lines[6:8]] == [["1", "(50%)", "-"], ["1", "(50%)", "-"]]  # weight, share, drain
    start = lines.index("Migration matrix, last hour")
    assert [line.split() for line in lines[start + 3 : start + 8]] == [
        ["v1", "v1", "relayed", "4", "0"],
        ["v1", "v2-modern", "translated", "3", "0"],
        ["v2-session", "v1", "translated", "3", "0"],
        ["v2-modern", "v1", "translated", "3", "1"],
        ["v2-modern", "v2-modern", "relayed", "3", "0"],
    ]
    start = lines.index("Migration matrix by backend, last hour")
    assert [line.split() for line in lines[start + 3 : start + 8]] == [
        ["old", "v1", "v1", "relayed", "4", "0"],
        ["old", "v2-session", "v1", "translated", "3", "0"],
        ["old", "v2-modern", "v1", "translated", "3", "1"],
        ["new", "v1", "v2-modern", "translated", "3", "0"],
        ["new", "v2-modern", "v2-modern", "relayed", "3", "0"],
    ]
    start = next(i for i, line in enumerate(lines) if line.startswith("Clients still on v1"))
    row = lines[start + 3].split()
    assert (row[:3], row[-1]) == (["legacy-cli", "1.2.0", "7"], "new,old")
    start = lines.index("All clients")  # the client inventory of docs/migration.md
    assert [(r.split()[:5], r.split()[-1]) for r in lines[start + 3 : start + 7]] == [
        (["v2-modern", "curl-walk", "1.0", "2", "0"], "new,old"),
        (["v2-modern", "modern-app", "3.0.0", "4", "1"], "new,old"),
        (["v1", "legacy-cli", "1.2.0", "7", "0"], "new,old"),
        (["v2-session", "bridge-agent", "0.9.0", "3", "0"], "old"),
    ]
    start = lines.index("Clients leaning on the proxy")
    assert [line.split() for line in lines[start + 3 : start + 5]] == [
        ["v2-modern", "modern-app", "3.0.0", "4", "3", "mcp-name=3"],
        ["v2-modern", "curl-walk", "1.0", "2", "2", "mcp-method=2,mcp-name=2"],
    ]
    start = lines.index("Failures by reason, last hour")
    assert lines[start + 3].split() == ["old", "v2-modern", "v1", "translated", "task_unknown", "proxy", "1"]


async def test_a_post_that_is_neither_modern_nor_a_sessions_is_counted_in_a_row_of_its_own(reference_v1_server, tmp_path):
    """A plain POST without the 2026-07-28 envelope and without a session is refused before it has
    a dialect: it is counted as "unclassified" (mode "refused"), never under v2-modern (issue 26)."""
    async with running_proxy(reference_v1_server.url, tmp_path, store="memory") as proxy, aiohttp.ClientSession() as http:
        plain = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        async with http.post(proxy.url, json=plain, headers={"Accept": "application/json, text/event-stream"}) as refused:
            assert (refused.status, (await refused.json())["error"]["code"]) == (400, -32600)
        async with http.get(proxy.base_url + "/status.json") as response:
            status = await response.json()
        async with http.get(proxy.base_url + "/metrics") as response:
            metrics = await response.text()
    row = {"client_dialect": "unclassified", "backend_dialect": "v1", "mode": "refused", "requests": 1, "errors": 1}
    assert status["matrix"]["last_hour"] == [row]
    assert status["matrix_by_backend"]["last_hour"] == [{"backend": "main", **row}]
    assert [(c["dialect"], c["name"]) for c in status["clients"]] == [("unclassified", "unknown")]
    assert (
        'mcp_tasks_proxy_requests_total{backend_dialect="v1",face="unclassified",method="tools/list",outcome="-32600"} 1.0'
        in metrics
    )
    assert "v2-modern" not in json.dumps(status["matrix"])


async def test_the_status_command_prints_the_proxys_reason_for_a_403(reference_v1_server, tmp_path):
    """With `status_token` set, a read without it is refused from loopback too; the command says why
    (the proxy's own reason), not only "HTTP Error 403"."""
    import sys

    async with running_proxy(reference_v1_server.url, tmp_path, status_token="a-status-token-of-20") as proxy:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "proxy",
            "status",
            proxy.base_url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={k: v for k, v in os.environ.items() if k != "MCP_TASKS_PROXY_STATUS_TOKEN"},
        )
        out, err = await process.communicate()
    assert (process.returncode, out, err.decode()) == (
        1,
        b"",
        f"mcp-tasks-proxy status: {proxy.base_url}/status.json: HTTP 403: forbidden: give Authorization: Bearer <status_token>\n",
    )
