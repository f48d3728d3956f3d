"""Backends on the 2024-11-05 HTTP+SSE transport (docs/behaviour.md §7, decision 171), behind the
proxy by their URL alone (`transport = "auto"`: the probe finds the event stream): an `mcp` 1.30
FastMCP server on `sse_app()` (`tests/peers/sse_fastmcp1_server.py`, no tasks) and
`@modelcontextprotocol/server-everything` 2026.8.31 in its `sse` mode. A 2026-07-28 client gets
plain answers, held tasks and the server's questions; the official `mcp` 1.30 client opens a
session of its own; a server killed mid-call ends that call with an error at once, and once it is
back the next call works. The proxy lives through several probe intervals (300 ms) in each test."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from held_support import held_proxy
from peer_checks import ChecksRun, run_script, serving
from support import Caller, free_port

from proxy.demo.node_packages import SERVER_EVERYTHING, ensure_npm_packages
from proxy.demo.node_tools import ensure_conformance
from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers

PEERS = Path(__file__).resolve().parents[1] / "peers"
NODE_DIR = Path(__file__).resolve().parents[1] / "node"
HOLD_AFTER_MS = 1000


def start_fastmcp_sse(port: int = 0) -> ServerProcess:
    argv = [str(ensure_peer_env("mcp-v1")), str(PEERS / "sse_fastmcp1_server.py"), "--host", "127.0.0.1", "--port", str(port)]
    return ServerProcess.start(argv)


def sse_url(server: ServerProcess) -> str:
    """The server's event stream: the fixture servers announce `…/mcp`; an SSE server's is `/sse`."""
    return server.url.removesuffix("/mcp") + "/sse"


@pytest.fixture
def fastmcp_sse() -> Iterator[ServerProcess]:
    yield from serving(start_fastmcp_sse)


@pytest.fixture(scope="module")
def everything_sse() -> Iterator[ServerProcess]:
    """server-everything's `sse` transport on 127.0.0.1:<ephemeral> (loopback_listen.mjs binds it)."""
    prefix = ensure_npm_packages("server-everything", SERVER_EVERYTHING)
    entry = prefix / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
    node = str(ensure_conformance().node)
    server = ServerProcess.start([node, "--import", str(NODE_DIR / "loopback_listen.mjs"), str(entry), "sse"], env={"PORT": "0"})
    try:
        yield server
    finally:
        server.stop()


def text(value: str, *, structured: bool = True, is_error: bool = False) -> dict:
    result: dict = {"content": [{"type": "text", "text": value}]}
    if structured:
        result["structuredContent"] = {"result": value}
    return {**result, "isError": is_error, "resultType": "complete"}


async def test_a_2026_07_28_client_calls_held_and_asking_tools_of_a_fastmcp_sse_server(fastmcp_sse, tmp_path):
    table = {"name": "main", "url": sse_url(fastmcp_sse), "hold_after_ms": HOLD_AFTER_MS}
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        tools = (await caller.call("tools/list")).result["tools"]
        assert [tool["name"] for tool in tools] == ["greet", "slow_compute", "failing_job", "confirm_delete"]
        assert (await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})).result == text("Hello, Ada!")

        started = time.monotonic()
        created = await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 3, "label": "held"}})
        elapsed = time.monotonic() - started
        assert HOLD_AFTER_MS / 1000 <= elapsed < HOLD_AFTER_MS / 1000 + 1.0, elapsed
        assert (created.result["resultType"], created.result["status"]) == ("task", "working")
        final = await caller.poll(created.result["taskId"])
        assert (final["status"], final["result"]) == ("completed", text("computed held"))

        failed = await caller.call("tools/call", {"name": "failing_job", "arguments": {"seconds": 0.1}})
        assert failed.result == {
            "content": [{"type": "text", "text": "Error executing tool failing_job: failing_job always fails"}],
            "isError": True,
            "resultType": "complete",
        }

        asking = (
            await caller.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "a.txt", "delay": 0.1}})
        ).result
        assert (asking["resultType"], list(asking["inputRequests"])) == ("input_required", ["r1"])
        assert asking["inputRequests"]["r1"] == {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Delete a.txt?",
                "requestedSchema": {
                    "properties": {"confirm": {"title": "Confirm", "type": "boolean"}},
                    "required": ["confirm"],
                    "title": "Confirmation",
                    "type": "object",
                },
            },
        }
        answered = await caller.call(
            "tools/call",
            {
                "name": "confirm_delete",
                "requestState": asking["requestState"],
                "inputResponses": {"r1": {"action": "accept", "content": {"confirm": True}}},
            },
        )
        assert answered.result == text("deleted a.txt")
        await asyncio.sleep(1.0)  # through more probe intervals: the probe keeps its own upstream session
        assert (await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Bo"}})).result == text("Hello, Bo!")


MCP1_CHECKS = ["sync_tool", "create_task_shape", "get_is_flat", "elicitation_in_task", "list_tasks", "cancel"]


async def test_the_official_mcp1_client_opens_a_session_through_the_proxy_to_a_fastmcp_sse_server(fastmcp_sse, tmp_path):
    table = {"name": "main", "url": sse_url(fastmcp_sse), "hold_after_ms": HOLD_AFTER_MS}
    async with held_proxy(table, tmp_path / "state") as proxy:
        checks = [arg for name in MCP1_CHECKS for arg in ("--check", name)]
        run = ChecksRun(
            "mcp1 client", *await run_script(ensure_peer_env("mcp-v1"), PEERS / "mcp1_client_checks.py", proxy.url, 300, *checks)
        )
    assert {name: line["ok"] for name, line in run.lines.items()} == dict.fromkeys(MCP1_CHECKS, True), run.explain()


async def test_a_server_killed_mid_call_ends_the_call_with_an_error_and_the_next_call_works(tmp_path):
    port = free_port()
    server = start_fastmcp_sse(port)
    table = {"name": "main", "url": sse_url(server), "hold_tasks": "off"}
    try:
        async with held_proxy(table, tmp_path / "state", upstream_timeout_ms=60_000) as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            assert (await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})).result == text(
                "Hello, Ada!"
            )
            call = asyncio.ensure_future(
                caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 30, "label": "x"}})
            )
            await asyncio.sleep(0.5)  # the call is on its way (nothing else to wait for: the server says nothing until done)
            os.kill(server.pid, signal.SIGKILL)
            started = time.monotonic()
            broken = await asyncio.wait_for(call, 10)
            assert time.monotonic() - started < 5
            assert (broken.status, broken.error["code"]) == (502, -32603)
            assert broken.error["message"] == (
                "Backend 'main' unavailable: its SSE session was lost: reading it failed (ClientPayloadError)"
            )
            server.stop()  # reaped
            server = start_fastmcp_sse(port)
            deadline = time.monotonic() + 20
            while True:
                again = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Bo"}})
                if again.status == 200 or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert again.result == text("Hello, Bo!")
    finally:
        server.stop()


async def test_server_everything_in_sse_mode_behind_the_proxy_by_its_url(everything_sse, tmp_path):
    table = {
        "name": "main",
        "url": sse_url(everything_sse),
        "hold_after_ms": HOLD_AFTER_MS,
        "hold_tools": ["trigger-long-running-operation"],
    }
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        names = [tool["name"] for tool in (await caller.call("tools/list")).result["tools"]]
        assert {"echo", "get-sum", "trigger-long-running-operation", "trigger-elicitation-request"} <= set(names), names
        echo = await caller.call("tools/call", {"name": "echo", "arguments": {"message": "hi"}})
        assert echo.result == {"content": [{"type": "text", "text": "Echo: hi"}], "resultType": "complete"}
        started = time.monotonic()
        created = await caller.call(
            "tools/call", {"name": "trigger-long-running-operation", "arguments": {"duration": 3, "steps": 3}}
        )
        assert time.monotonic() - started < HOLD_AFTER_MS / 1000 + 1.0
        assert (created.result["resultType"], created.result["status"]) == ("task", "working")
        final = await caller.poll(created.result["taskId"], timeout=30)
        assert (final["status"], final["result"]) == (
            "completed",
            {
                "content": [{"type": "text", "text": "Long running operation completed. Duration: 3 seconds, Steps: 3."}],
                "resultType": "complete",
            },
        )
        asking = (await caller.call("tools/call", {"name": "trigger-elicitation-request", "arguments": {}})).result
        assert asking["resultType"] == "input_required", asking
        [(key, question)] = asking["inputRequests"].items()
        assert question["method"] == "elicitation/create"
        answered = await caller.call(
            "tools/call",
            {
                "name": "trigger-elicitation-request",
                "arguments": {},
                "requestState": asking["requestState"],
                "inputResponses": {key: {"action": "decline"}},
            },
        )
        assert answered.result["content"][0] == {"type": "text", "text": "❌ User declined to provide the requested information."}


async def test_the_official_mcp1_client_calls_server_everything_in_sse_mode_through_the_proxy(everything_sse, tmp_path):
    table = {"name": "main", "url": sse_url(everything_sse)}
    calls = [{"list": True}, {"name": "echo", "arguments": {"message": "hi"}}, {"name": "get-sum", "arguments": {"a": 2, "b": 3}}]
    async with held_proxy(table, tmp_path / "state") as proxy:
        _, out, err = await run_script(
            ensure_peer_env("mcp-v1"), PEERS / "mcp1_tool_calls.py", proxy.url, 120, "--calls", json.dumps(calls)
        )
    listed, echo, total = [json.loads(line) for line in out.splitlines()]
    assert {"echo", "get-sum", "trigger-long-running-operation"} <= set(listed["tools"]), (listed, err[-2000:])
    assert (echo, total) == (
        {"texts": ["Echo: hi"], "isError": False},
        {"texts": ["The sum of 2 and 3 is 5."], "isError": False},
    )
