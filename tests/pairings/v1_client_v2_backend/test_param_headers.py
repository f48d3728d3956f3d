"""`Mcp-Param-{Name}` headers (docs/wire.md §4.3) on the `tools/call` the proxy sends a 2026-07-28
backend whose tools mark arguments with `x-mcp-header` (issue 37, defect 10).

The backend is `tests/peers/param_header_v2_server.py` (FastMCP 4.1.4): its SDK refuses a call whose
headers are missing or disagree with the body (HTTP 400, `-32020`), as the direct tests below show.
A v1 client (the official `mcp` 1.30 SDK, `tests/peers/mcp1_tool_calls.py`) gets its calls through
the translating pairing, ASCII and non-ASCII values alike; a v2-modern client's own headers pass
through the relay untouched.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from peer_checks import serving
from support import Caller, running_proxy
from tap import RecordingTap

from proxy.demo.peers import ensure_peer_env
from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers

PEERS = Path(__file__).resolve().parents[2] / "peers"
CALLS_SCRIPT = PEERS / "mcp1_tool_calls.py"
MISSING_SHARD = "Mcp-Param-Shard header is missing but the request body's 'shard' argument is present"


def _start() -> ServerProcess:
    argv = [str(ensure_peer_env("fastmcp4")), str(PEERS / "param_header_v2_server.py"), "--host", "127.0.0.1", "--port", "0"]
    return ServerProcess.start(argv, env={"FASTMCP_SHOW_SERVER_BANNER": "false", "FASTMCP_CHECK_FOR_UPDATES": "off"})


@pytest.fixture(scope="module")
def param_server() -> Iterator[ServerProcess]:
    yield from serving(_start)


async def _v1_calls(url: str, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The official v1 client's answers to `calls`, one session, through `url`."""
    child = await asyncio.create_subprocess_exec(
        str(ensure_peer_env("mcp-v1")), str(CALLS_SCRIPT), "--url", url, "--calls", json.dumps(calls),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(child.communicate(), 90)
    assert child.returncode == 0, stderr.decode()[-3000:]
    return [json.loads(line) for line in stdout.decode().splitlines()]


async def test_the_backend_refuses_a_call_without_its_headers(param_server):
    async with aiohttp.ClientSession() as http:
        caller = Caller(http, param_server.url, declare=False)
        named = {"Mcp-Name": "route"}
        bare = await caller.call("tools/call", {"name": "route", "arguments": {"region": "eu", "shard": 3}}, headers=named)
        headed = await caller.call(
            "tools/call",
            {"name": "route", "arguments": {"region": "eu", "shard": 3}},
            headers={**named, "Mcp-Param-Region": "eu", "Mcp-Param-Shard": "3"},
        )
    assert (bare.status, bare.error) == (400, {"code": -32020, "message": MISSING_SHARD})
    assert (headed.status, headed.result["content"]) == (200, [{"type": "text", "text": "routed eu/3: "}])


async def test_a_v1_client_calls_tools_with_header_arguments_through_the_proxy(param_server, tmp_path):
    calls = [
        {"name": "route", "arguments": {"region": "eu-west", "shard": 3, "note": "plain"}},
        {"name": "route", "arguments": {"region": "Zürich 東京", "shard": 7, "note": "ü"}},
        {"name": "route", "arguments": {"region": " padded", "shard": -1}},
        {"name": "route_later", "arguments": {"region": "=?base64?literal?="}},
    ]
    async with running_proxy(param_server.url, tmp_path) as proxy:
        lines = await _v1_calls(proxy.url, calls)
    assert lines == [
        {"texts": ["routed eu-west/3: plain"], "isError": False},
        {"texts": ["routed Zürich 東京/7: ü"], "isError": False},
        {"texts": ["routed  padded/-1: "], "isError": False},
        {"texts": ["later =?base64?literal?="], "isError": False},
    ]


async def test_the_annotations_are_read_once_and_learnt_from_the_client_s_own_list(param_server, tmp_path):
    """A call of a tool not known yet reads the backend's list once; a v1 client's own `tools/list`
    teaches the proxy too, so no list of its own goes upstream then."""
    tap = await RecordingTap.start(param_server.url)
    try:
        async with running_proxy(tap.url, tmp_path) as proxy:
            mark = len(tap.methods)
            lines = await _v1_calls(proxy.url, [{"name": "route", "arguments": {"region": "a", "shard": 1}}] * 2)
            first = tap.since(mark)
        async with running_proxy(tap.url, tmp_path / "second") as proxy:
            mark = len(tap.methods)
            listed = await _v1_calls(proxy.url, [{"list": True}, {"name": "route", "arguments": {"region": "naïve", "shard": 2}}])
            second = tap.since(mark)
    finally:
        await tap.stop()
    assert lines == [{"texts": ["routed a/1: "], "isError": False}] * 2
    # The proxy's own list before the first call; the SDK lists the tools itself after its first
    # call (to read their output schemas): the proxy learns from that too, and lists no more.
    assert [m for m in first if m.startswith("tools/")] == ["tools/list", "tools/call", "tools/list", "tools/call"]
    assert listed == [{"tools": ["route", "route_later"]}, {"texts": ["routed naïve/2: "], "isError": False}]
    assert [m for m in second if m.startswith("tools/")] == ["tools/list", "tools/call"]


async def test_a_relayed_v2_modern_client_s_headers_reach_the_backend_untouched(param_server, tmp_path):
    arguments = {"region": "Zürich", "shard": 7}
    async with running_proxy(param_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url, declare=False)
        headed = await caller.call(
            "tools/call",
            {"name": "route", "arguments": arguments},
            headers={"Mcp-Param-Region": "=?base64?WsO8cmljaA==?=", "mcp-param-shard": "7"},
        )
        bare = await caller.call("tools/call", {"name": "route", "arguments": arguments})
    assert (headed.status, headed.result["content"]) == (200, [{"type": "text", "text": "routed Zürich/7: "}])
    # The relay adds nothing of its own: the backend's refusal reaches the client.
    assert (bare.status, bare.error) == (400, {"code": -32020, "message": MISSING_SHARD})
