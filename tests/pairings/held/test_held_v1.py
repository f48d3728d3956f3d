"""Held tasks for v1 clients (docs/behaviour.md §9): the official `mcp` 1.30 client
(`tests/peers/mcp1_client_checks.py`) through the proxy to the task-less mcp 1.30 server over HTTP
and on stdio, its session relayed. `params.task` on a tool without task support creates a held
task at once; `tasks/get`, the blocking `tasks/result` (the server's question arriving there with
related-task `_meta`), `tasks/list` and `tasks/cancel` are the proxy's; `tools/list` shows such tools
`taskSupport: "optional"`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from held_support import events_of, held_proxy
from session_support import SessionCaller

from proxy.demo.peers import ensure_peer_env

pytestmark = pytest.mark.peers
PEERS = Path(__file__).resolve().parents[2] / "peers"
MCP1_CHECKS = [
    "sync_tool",
    "create_task_shape",
    "get_is_flat",
    "tool_error_failed",
    "result_related_meta",
    "cancel",
    "cancel_finished_and_unknown",
    "list_tasks",
    "concurrent_creations",
    "finished_still_readable",
    "elicitation_in_task",
]


async def test_mcp1_client_checks(untasked, tmp_path):
    table, events = untasked
    async with held_proxy(table, tmp_path / "state") as proxy:
        argv = [str(ensure_peer_env("mcp-v1")), str(PEERS / "mcp1_client_checks.py"), "--url", proxy.url]
        for name in MCP1_CHECKS:
            argv += ["--check", name]
        process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), 400)
    lines = {line["check"]: line for line in map(json.loads, out.decode().splitlines()) if "check" in line}
    assert {name: line["ok"] for name, line in lines.items()} == dict.fromkeys(MCP1_CHECKS, True), (lines, err.decode()[-2000:])
    assert {"event": "cancelled", "tool": "slow_compute", "label": "cancel"} in events_of(events)


async def test_the_raw_v1_wire_of_a_held_task(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        init = await caller.initialize()  # the server declares no tasks; the proxy declares the held ones
        assert init["result"]["capabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        tools = {tool["name"]: tool for tool in (await caller.call("tools/list"))["result"]["tools"]}
        assert {name: tool.get("execution") for name, tool in tools.items()} == dict.fromkeys(
            ["greet", "slow_compute", "failing_job", "protocol_error_job", "confirm_delete"], {"taskSupport": "optional"}
        )
        plain = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})  # no params.task: relayed
        assert plain["result"] == {"content": [{"type": "text", "text": "Hello, Ada!"}], "isError": False}
        created = (
            await caller.call("tools/call", {"name": "protocol_error_job", "arguments": {"seconds": 0.5}, "task": {"ttl": 60000}})
        )["result"]
        task = created["task"]
        assert (set(task), task["status"], task["ttl"], task["pollInterval"]) == (
            {"taskId", "status", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"},
            "working",
            60000,
            1000,
        )
        answer = await caller.call("tasks/result", {"taskId": task["taskId"]})  # blocks until the end
        assert answer["error"] == {"code": -32000, "message": "protocol_error_job: simulated internal failure"}
        got = (await caller.call("tasks/get", {"taskId": task["taskId"]}))["result"]
        assert (got["status"], got["statusMessage"]) == ("failed", "protocol_error_job: simulated internal failure")
        listed = (await caller.call("tasks/list"))["result"]
        assert [t["taskId"] for t in listed["tasks"]] == [task["taskId"]]
        for cursor in ("garbage", {"a": 1}, 12):
            refused = await caller.call("tasks/list", {"cursor": cursor})
            assert refused["error"] == {"code": -32602, "message": "Invalid cursor"}, cursor
        other = SessionCaller(http, proxy.url)
        await other.initialize()
        assert (await other.call("tasks/list"))["result"] == {"tasks": []}
        assert (await other.call("tasks/get", {"taskId": task["taskId"]}))["error"]["code"] == -32602


async def test_beyond_the_bounds_params_task_is_refused_before_anything_goes_upstream(untasked, tmp_path):
    table, events = untasked
    async with held_proxy(table, tmp_path / "state", max_held_per_principal=1) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        first = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 2, "label": "a"}, "task": {}})
        assert first["result"]["task"]["status"] == "working"
        second = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 2, "label": "b"}, "task": {}})
        assert second["error"] == {
            "code": -32603,
            "message": "Too many held calls (at most 1000, 1 per principal): try again later",
        }
    assert [e["label"] for e in events_of(events) if e["event"] == "started" and e["tool"] == "slow_compute"] == ["a"]


async def test_held_tasks_are_listed_in_pages_bound_to_the_session(untasked, tmp_path):
    table, _ = untasked
    async with held_proxy(table, tmp_path / "state", list_page_size=1) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        ids = []
        for label in ("a", "b"):
            params = {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": label}, "task": {}}
            ids.append((await caller.call("tools/call", params))["result"]["task"]["taskId"])
        first = (await caller.call("tasks/list"))["result"]
        assert ([t["taskId"] for t in first["tasks"]], "nextCursor" in first) == ([ids[0]], True)
        second = (await caller.call("tasks/list", {"cursor": first["nextCursor"]}))["result"]
        assert ([t["taskId"] for t in second["tasks"]], "nextCursor" in second) == ([ids[1]], False)
        other = SessionCaller(http, proxy.url)
        await other.initialize()
        refused = await other.call("tasks/list", {"cursor": first["nextCursor"]})  # another session's cursor
        assert refused["error"] == {"code": -32602, "message": "Invalid cursor"}
