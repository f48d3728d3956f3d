"""Tool results per backend (issue 39, parts 1-2): every answered `tools/call` is counted by
backend, tool and outcome (`ok`, `tool_error`, `protocol_error`, `timeout`, `refused`) in
`mcp_tasks_proxy_tool_results_total`, and `/status.json`'s `tools` compares, for a tool served by
several backends, each backend against the first that serves it (its baseline): "worse" when its
tool-error or error rate is above the baseline's beyond chance, or its p95 above twice the
baseline's. The status page and `mcp-tasks-proxy status` show the same rows.

Real peers: two plain servers on the official `mcp` 1.30 SDK (`FastMCP`, no tasks, written as a
user writes one: `LOOKUP_SERVER` below), both listing `lookup`; the one started with
`LOOKUP_FAILS=1` raises in it, which FastMCP answers as a result with `isError: true`. Clients:
2026-07-28 clients (translated to the v1 backends) and the official `mcp` 1.30 client
(`tests/peers/mcp1_tool_calls.py`, one session per run: relayed).

Weights 1:1 and the default balance ("picks"): modern `tools/call`s and v1 `initialize`s share
one smooth weighted round robin, ties going to the first backend, so new work alternates
old, new, old, … and each v1 session's calls all go where its `initialize` went."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from peer_checks import mcp1_tool_calls
from support import Caller, running_proxy

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "peers"
SERVERS = ROOT / "proxy" / "demo" / "servers"  # loopback_serve, the fixture servers' shared entry point
METRIC = "mcp_tasks_proxy_tool_results_total"
OUTCOMES = ("ok", "tool_error", "protocol_error", "timeout", "refused")

LOOKUP_SERVER = '''"""A plain MCP server on the official mcp 1.30 SDK: FastMCP, one tool, no tasks.

With LOOKUP_FAILS=1 in its environment, `lookup` raises (FastMCP answers a tool error)."""

import os

import loopback_serve
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("lookup-server")
FAILS = os.environ.get("LOOKUP_FAILS") == "1"


@mcp.tool()
def lookup(key: str) -> str:
    """Looks a key up."""
    if FAILS:
        raise ValueError(f"the lookup of {key} failed")
    return f"value of {key}"


if __name__ == "__main__":
    loopback_serve.main(__doc__, mcp.streamable_http_app)
'''


# --------------------------------------------------------------------------------------------
# Peers and clients
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lookup_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, ServerProcess]]:
    """(old, new): `LOOKUP_SERVER` answering normally, and the same failing every `lookup`. The
    counts live in each test's own proxy, so the servers are shared by the module; each is
    stopped by its own handle."""
    script = tmp_path_factory.mktemp("lookup-server") / "lookup_server.py"
    script.write_text(LOOKUP_SERVER)
    python = str(ensure_peer_env("mcp-v1"))
    argv = [python, str(script), "--host", "127.0.0.1", "--port", "0"]
    old = ServerProcess.start(argv, env={"PYTHONPATH": str(SERVERS)})
    try:
        new = ServerProcess.start(argv, env={"PYTHONPATH": str(SERVERS), "LOOKUP_FAILS": "1"})
        try:
            yield old, new
        finally:
            new.stop()
    finally:
        old.stop()


def _fleet(old: ServerProcess, new: ServerProcess) -> list[dict[str, Any]]:
    return [{"name": "old", "url": old.url, "weight": 1}, {"name": "new", "url": new.url, "weight": 1}]


async def _modern_lookups(caller: Caller, count: int, tool: str = "lookup") -> list[dict[str, Any]]:
    """`count` 2026-07-28 `tools/call`s of `tool`, one after the other; their results."""
    results = []
    for index in range(count):
        answer = await caller.call("tools/call", {"name": tool, "arguments": {"key": f"m{index}"}})
        assert answer.status == 200, answer.body
        results.append(answer.result)
    return results


async def _v1_session_calls(url: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One session of the official mcp 1.30 client making `calls` (`peer_checks.mcp1_tool_calls`)."""
    return await mcp1_tool_calls(url, calls)


def _lookups(count: int, prefix: str) -> list[dict[str, Any]]:
    return [{"name": "lookup", "arguments": {"key": f"{prefix}{index}"}} for index in range(count)]


# --------------------------------------------------------------------------------------------
# Reading the proxy back
# --------------------------------------------------------------------------------------------


def _labels(text: str) -> dict[str, str]:
    """`a="x",b="y"` → {"a": "x", "b": "y"} (the values here hold no quote or comma)."""
    pairs = [part.split("=", 1) for part in text.split(",") if part]
    return {key: value.strip('"') for key, value in pairs}


async def _tool_samples(http: aiohttp.ClientSession, base_url: str) -> dict[tuple[str, str, str], float]:
    """`mcp_tasks_proxy_tool_results_total`'s samples: (backend, tool, outcome) → value. Every
    sample must carry exactly these three labels."""
    async with http.get(base_url + "/metrics") as response:
        assert response.status == 200
        text = await response.text()
    samples: dict[tuple[str, str, str], float] = {}
    for line in text.splitlines():
        if not line.startswith(METRIC + "{"):
            continue
        labelled, value = line.rsplit(" ", 1)
        labels = _labels(labelled[len(METRIC) + 1 : -1])
        assert set(labels) == {"backend", "tool", "outcome"}, line
        assert labels["outcome"] in OUTCOMES, line
        samples[(labels["backend"], labels["tool"], labels["outcome"])] = float(value)
    families = sorted({line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")})
    assert samples, f"no {METRIC} sample in /metrics (its families: {families})"
    return samples


async def _status(http: aiohttp.ClientSession, base_url: str) -> dict[str, Any]:
    async with http.get(base_url + "/status.json") as response:
        assert response.status == 200
        return await response.json()


def _tools(status: dict[str, Any]) -> list[dict[str, Any]]:
    assert "tools" in status, f"/status.json has no 'tools' key (keys: {sorted(status)})"
    assert status.get("tools_window_minutes") == 60, status.get("tools_window_minutes")
    return status["tools"]


def _entry(tools: list[dict[str, Any]], tool: str) -> dict[str, Any]:
    found = [entry for entry in tools if entry["tool"] == tool]
    assert len(found) == 1, tools
    return found[0]


def _row(entry: dict[str, Any], backend: str) -> dict[str, Any]:
    found = [row for row in entry["backends"] if row["backend"] == backend]
    assert len(found) == 1, entry
    return found[0]


def _counts(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in ("backend", "calls", *OUTCOMES, "tool_error_rate", "error_rate")}


def _row_keys() -> set[str]:
    return {"backend", "calls", *OUTCOMES, "tool_error_rate", "error_rate", "p50_ms", "p95_ms", "verdict"}


# --------------------------------------------------------------------------------------------
# 1. A backend whose tool fails is "worse" than the one before it
# --------------------------------------------------------------------------------------------


async def test_a_backend_failing_its_tool_is_counted_and_judged_worse(lookup_servers, tmp_path):
    old, new = lookup_servers
    async with (
        running_proxy("", tmp_path, upstream=_fleet(old, new), store="memory") as proxy,
        aiohttp.ClientSession() as http,
    ):
        modern = await _modern_lookups(Caller(http, proxy.url), 40)
        # Picks 1 to 40 alternate old, new, …: old answers, new's tool raises (FastMCP: isError).
        assert [bool(r.get("isError")) for r in modern] == [False, True] * 20
        assert modern[0]["content"] == [{"type": "text", "text": "value of m0"}]
        assert modern[1]["content"] == [{"type": "text", "text": "Error executing tool lookup: the lookup of m1 failed"}]

        # Four sessions of the official v1 client, five calls each: initializes are picks 41 to 44
        # (old, new, old, new), and every call of a session goes to its backend.
        sessions = [await _v1_session_calls(proxy.url, _lookups(5, f"s{n}-")) for n in range(4)]
        assert [[line.get("isError") for line in lines] for lines in sessions] == [
            [False] * 5,
            [True] * 5,
            [False] * 5,
            [True] * 5,
        ]
        assert sessions[0][0] == {"texts": ["value of s0-0"], "isError": False}
        assert sessions[1][0] == {"texts": ["Error executing tool lookup: the lookup of s1-0 failed"], "isError": True}

        samples = await _tool_samples(http, proxy.base_url)
        status = await _status(http, proxy.base_url)
        page = await (await http.get(proxy.base_url + "/status")).text()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy", "status", proxy.base_url, stdout=asyncio.subprocess.PIPE
        )
        printed, _ = await process.communicate()

    # 20 modern and 10 session calls on each backend.
    assert samples[("new", "lookup", "tool_error")] >= 15
    assert samples[("old", "lookup", "ok")] >= 15
    assert sum(value for (_, tool, _), value in samples.items() if tool == "lookup") == 60
    assert {key: value for key, value in samples.items() if value} == {
        ("old", "lookup", "ok"): 30.0,
        ("new", "lookup", "tool_error"): 30.0,
    }

    tools = _tools(status)
    assert [entry["tool"] for entry in tools] == ["lookup"]
    entry = tools[0]
    assert [row["backend"] for row in entry["backends"]] == ["old", "new"]  # configuration order
    assert all(set(row) == _row_keys() for row in entry["backends"]), entry
    old_row, new_row = entry["backends"]
    assert _counts(old_row) == {
        "backend": "old",
        "calls": 30,
        "ok": 30,
        "tool_error": 0,
        "protocol_error": 0,
        "timeout": 0,
        "refused": 0,
        "tool_error_rate": 0.0,
        "error_rate": 0.0,
    }
    assert _counts(new_row) == {
        "backend": "new",
        "calls": 30,
        "ok": 0,
        "tool_error": 30,
        "protocol_error": 0,
        "timeout": 0,
        "refused": 0,
        "tool_error_rate": 1.0,
        "error_rate": 0.0,
    }
    for row in (old_row, new_row):
        assert isinstance(row["p50_ms"], (int, float)) and isinstance(row["p95_ms"], (int, float)), row
        assert 0 <= row["p50_ms"] <= row["p95_ms"], row
    assert old_row["verdict"] is None  # the baseline: the first backend serving the tool
    verdict = new_row["verdict"]
    assert (verdict["against"], verdict["outcome"]) == ("old", "worse"), verdict
    assert set(verdict) == {"against", "outcome", "reason"}
    assert isinstance(verdict["reason"], str) and verdict["reason"], verdict
    assert "old" in verdict["reason"], verdict  # names its baseline

    # The status page: a Tools section whose table has the same rows; new's verdict says "worse".
    assert ">Tools" in page, page[:2000]
    from browser import tables

    judged = [rows for rows in tables(page).values() if any("new" in row and any("worse" in c for c in row) for row in rows)]
    assert len(judged) == 1, tables(page)
    page_rows = {row[1]: row for row in judged[0] if row[:1] == ["lookup"]}
    assert [page_rows[name][:8] for name in ("old", "new")] == [
        ["lookup", "old", "30", "30", "0", "0", "0", "0"],
        ["lookup", "new", "30", "0", "30", "0", "0", "0"],
    ]
    assert page_rows["new"][-1].startswith("worse"), page_rows["new"]
    assert "worse" not in " ".join(page_rows["old"]), page_rows["old"]

    # `mcp-tasks-proxy status`: a Tools section with a line naming the tool, new and "worse".
    assert process.returncode == 0
    lines = printed.decode().splitlines()
    assert any(line.startswith("Tools") for line in lines), printed.decode()
    printed_rows = {line.split()[1]: line for line in lines if line.split()[:1] == ["lookup"]}
    assert [printed_rows[name].split()[:8] for name in ("old", "new")] == [
        ["lookup", "old", "30", "30", "0", "0", "0", "0"],
        ["lookup", "new", "30", "0", "30", "0", "0", "0"],
    ], printed.decode()
    assert "worse" in printed_rows["new"] and "worse" not in printed_rows["old"], printed.decode()


# --------------------------------------------------------------------------------------------
# 2. The operator's trial: with a store, the failures show at once
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("store", ["sqlite", "redis"])
async def test_the_failures_of_the_new_backend_show_within_five_seconds(lookup_servers, store, request, tmp_path):
    """The proxy counts into its store (sqlite in its state dir, or Redis), as deployed; after the
    last call, `/status.json` is polled (no fixed sleep) until each backend's row for `lookup`
    counts every call it answered, which must happen within 5 s; the page (HTML) shows the same
    rows then."""
    old, new = lookup_servers
    store_url = request.getfixturevalue("redis_url") if store == "redis" else "sqlite"
    async with (
        running_proxy("", tmp_path, upstream=_fleet(old, new), store=store_url) as proxy,
        aiohttp.ClientSession() as http,
    ):
        modern = await _modern_lookups(Caller(http, proxy.url), 12)
        sessions = [await _v1_session_calls(proxy.url, _lookups(3, f"s{n}-")) for n in range(2)]
        last_call = time.monotonic()
        failed = sum(bool(r.get("isError")) for r in modern) + sum(line["isError"] for lines in sessions for line in lines)
        answered = len(modern) + sum(len(lines) for lines in sessions) - failed
        # Picks alternate: 6 modern calls on each, and the two sessions on old, then new.
        assert (answered, failed) == (9, 9)

        expected = {
            "old": {"calls": answered, "ok": answered, "tool_error": 0},
            "new": {"calls": failed, "ok": 0, "tool_error": failed},
        }
        seen: dict[str, Any] = {}
        while True:
            status = await _status(http, proxy.base_url)
            if "tools" in status:
                entry = [e for e in status["tools"] if e["tool"] == "lookup"]
                rows = {row["backend"]: row for row in entry[0]["backends"]} if entry else {}
                seen = {name: {k: rows[name][k] for k in ("calls", "ok", "tool_error")} for name in rows}
                if seen == expected:
                    break
            if time.monotonic() - last_call > 5:
                break
            await asyncio.sleep(0.05)
        shown_after = time.monotonic() - last_call
        page = await (await http.get(proxy.base_url + "/status")).text()

    _tools(status)
    assert seen == expected, (shown_after, status["tools"])
    assert shown_after <= 5, shown_after
    from browser import tables

    page_rows = {row[1]: row[:5] for rows in tables(page).values() for row in rows if row[:1] == ["lookup"]}
    assert page_rows == {  # tool, backend, calls, ok, tool errors: the operator's page, per backend and tool
        "old": ["lookup", "old", str(answered), str(answered), "0"],
        "new": ["lookup", "new", str(failed), "0", str(failed)],
    }, tables(page)
    rows = {row["backend"]: row for row in _entry(status["tools"], "lookup")["backends"]}
    assert rows["old"]["verdict"] is None
    verdict = rows["new"]["verdict"]
    assert verdict["against"] == "old", verdict
    # 9 calls on each side: below the 20 a comparison of rates needs. Only a p95 above twice the
    # baseline's could make it "worse" (if that rule is not held back by the 20 calls too).
    if rows["new"]["p95_ms"] <= 2 * rows["old"]["p95_ms"]:
        assert verdict["outcome"] == "too_few_calls", verdict
    else:
        assert verdict["outcome"] in ("too_few_calls", "worse"), verdict


# --------------------------------------------------------------------------------------------
# 3. A tool no backend lists is counted under "other"
# --------------------------------------------------------------------------------------------


async def test_a_tool_the_backend_does_not_list_is_counted_as_other(lookup_servers, tmp_path):
    old, new = lookup_servers
    async with (
        running_proxy("", tmp_path, upstream=_fleet(old, new), store="memory") as proxy,
        aiohttp.ClientSession() as http,
    ):
        # Picks 1 and 2: old, then new. FastMCP answers an unknown tool as a tool error.
        modern = await _modern_lookups(Caller(http, proxy.url), 2, tool="no_such_tool")
        assert [(r.get("isError"), r["content"]) for r in modern] == [
            (True, [{"type": "text", "text": "Unknown tool: no_such_tool"}]),
        ] * 2
        # A v1 session (pick 3: old), relayed: the same answer.
        lines = await _v1_session_calls(proxy.url, [{"name": "no_such_tool", "arguments": {"key": "s"}}])
        assert lines == [{"texts": ["Unknown tool: no_such_tool"], "isError": True}]
        samples = await _tool_samples(http, proxy.base_url)
        status = await _status(http, proxy.base_url)

    assert {key: value for key, value in samples.items() if value} == {
        ("old", "other", "tool_error"): 2.0,
        ("new", "other", "tool_error"): 1.0,
    }
    tools = _tools(status)
    assert [entry["tool"] for entry in tools] == ["other"]  # never the client's name: no label it can grow
    rows = _entry(tools, "other")["backends"]
    assert [(row["backend"], row["calls"], row["tool_error"], row["tool_error_rate"]) for row in rows] == [
        ("old", 2, 2, 1.0),
        ("new", 1, 1, 1.0),
    ]
    assert rows[0]["verdict"] is None
    assert (rows[1]["verdict"]["against"], rows[1]["verdict"]["outcome"]) == ("old", "too_few_calls")
