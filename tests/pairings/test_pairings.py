"""One test per pairing (docs/behaviour.md §3): a client of the face's dialect through the proxy to a
server of the backend's dialect, each doing a task lifecycle with a question for the client.

Real clients where public ones exist: FastMCP 4 (v2-modern) and the official mcp 1.30 SDK (v1).
No public v2-session client or server runs here, so those sides are the tests' raw session-wire
caller (`session_support.SessionCaller` declaring the extension) and the minimal v2-session peer
(`tests/peers/v2_session_server.py`).

Held tasks (docs/behaviour.md §9) have a folder of their own, `held/`, one module per face in
front of the task-less mcp 1.30 server over HTTP and on stdio (every cell where holding applies:
v2-modern, v1 and v2-session clients × HTTP and stdio backends), and `held/test_held_durable.py`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from peers.v2_session_server import start as start_v2_session_peer
from session_support import SessionCaller
from support import running_proxy

from proxy.demo.peers import ensure_peer_env

pytestmark = pytest.mark.peers
PEERS = Path(__file__).resolve().parents[1] / "peers"
EXT = "io.modelcontextprotocol/tasks"
V2_CHECKS = ["greet", "task_lifecycle", "tool_error", "elicitation", "cancel"]
V1_CHECKS = ["sync_tool", "create_task_shape", "result_related_meta", "cancel_finished_and_unknown", "elicitation_in_task"]


@pytest.fixture
async def v2_session_server():
    runner, url = await start_v2_session_peer("127.0.0.1", 0)
    yield url
    await runner.cleanup()


@pytest.fixture
def backend_url(request, reference_v1_server, reference_v2_server, v2_session_server):
    return {"v1": reference_v1_server.url, "v2-modern": reference_v2_server.url, "v2-session": v2_session_server}[request.param]


async def _checks(env: str, script: str, url: str, names: list[str]) -> dict[str, dict]:
    argv = [str(ensure_peer_env(env)), str(PEERS / script), "--url", url]
    for name in names:
        argv += ["--check", name]
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 240)
    lines = {line["check"]: line for line in map(json.loads, out.decode().splitlines()) if "check" in line}
    assert list(lines) == names, err.decode()[-2000:]
    return lines


@pytest.mark.parametrize("backend_url", ["v1", "v2-modern", "v2-session"], indirect=True)
async def test_v2_modern_client(backend_url, tmp_path):
    async with running_proxy(backend_url, tmp_path) as proxy:
        lines = await _checks("fastmcp4", "fastmcp4_client_checks.py", proxy.url, V2_CHECKS)
    assert {name: line["ok"] for name, line in lines.items()} == dict.fromkeys(V2_CHECKS, True), lines


@pytest.mark.parametrize("backend_url", ["v1", "v2-modern", "v2-session"], indirect=True)
async def test_v1_client(backend_url, tmp_path, request):
    async with running_proxy(backend_url, tmp_path) as proxy:
        lines = await _checks("mcp-v1", "mcp1_client_checks.py", proxy.url, V1_CHECKS)
    assert {name: line["ok"] for name, line in lines.items()} == dict.fromkeys(V1_CHECKS, True), lines


@pytest.mark.parametrize("backend_url", ["v1", "v2-modern", "v2-session"], indirect=True)
async def test_v2_session_client(backend_url, tmp_path):
    async with running_proxy(backend_url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url, capabilities={"elicitation": {}, "extensions": {EXT: {}}})
        init = await client.initialize()
        assert EXT in init["result"]["capabilities"]["extensions"]
        created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "p.txt"}}))["result"]
        assert created["resultType"] == "task"
        for _ in range(100):
            task = (await client.call("tasks/get", {"taskId": created["taskId"]}))["result"]
            if task["status"] == "input_required":
                break
            await asyncio.sleep(0.1)
        [key] = task["inputRequests"]
        ack = await client.call(
            "tasks/update",
            {"taskId": created["taskId"], "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}}},
        )
        assert ack["result"]["resultType"] == "complete"
        for _ in range(100):
            task = (await client.call("tasks/get", {"taskId": created["taskId"]}))["result"]
            if task["status"] == "completed":
                break
            await asyncio.sleep(0.1)
        assert task["result"]["content"][0]["text"] == "deleted p.txt"
