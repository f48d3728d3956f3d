"""`/metrics` counts what the official `mcp` 1.30 client received (issue 37 defect 6): N `tools/call`
answered whole are N `outcome="ok"`, none `cancelled`, in the relayed pairing (v1 client, v1 backend)
and the translated one (v1 client, v2-modern backend). The SDK closes its response streams and ends
its session (DELETE) right after its answers; a request is `cancelled` only when its client left
before the answer was written."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from oauth_support import ACCEPT, open_session
from stdio_support import running_stdio_proxy
from support import running_proxy

from proxy.demo.peers import ensure_peer_env

pytestmark = pytest.mark.peers
SCRIPT = Path(__file__).resolve().parents[1] / "peers" / "mcp1_repeat_calls.py"
TIMES = 6


async def _official_calls(url: str) -> list[list[str]]:
    """The texts of the answers to `TIMES` `tools/call greet` of the official client at `url`."""
    process = await asyncio.create_subprocess_exec(
        str(ensure_peer_env("mcp-v1")),
        str(SCRIPT),
        "--url",
        url,
        "--times",
        str(TIMES),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()[-2000:]
    return json.loads(out.decode().strip().splitlines()[-1])["answers"]


async def _tool_calls(http: aiohttp.ClientSession, base_url: str) -> dict[str, float]:
    """The v1 face's `tools/call` counts in `/metrics`, by outcome."""
    async with http.get(base_url + "/metrics") as response:
        text = await response.text()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("mcp_tasks_proxy_requests_total{") and 'face="v1"' in line and 'method="tools/call"' in line:
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = float(line.rsplit(" ", 1)[1])
    return counts


@pytest.mark.parametrize("backend", ["v1", "v1 slow to end its streams", "v1 on stdio", "v2-modern"])
async def test_every_call_the_official_client_received_is_counted_ok(backend, tapped, reference_v2_server, tmp_path):
    """Relayed (a v1 backend over HTTP; one whose SSE answers stay open after the answer until the
    client leaves, which the client does at once: its handler is cancelled after the answer was
    written; one the proxy runs on stdio) and translated (v2-modern backend): `TIMES` calls
    answered, `TIMES` counted ok."""
    if backend == "v1 slow to end its streams":
        tapped.linger_after_answer.add("tools/call")
    if backend == "v1 on stdio":
        running = running_stdio_proxy("v1", tmp_path)
    else:
        running = running_proxy(reference_v2_server.url if backend == "v2-modern" else tapped.url, tmp_path)
    async with running as proxy, aiohttp.ClientSession() as http:
        answers = await _official_calls(proxy.url)
        assert answers == [[f"Hello, call {index}!"] for index in range(TIMES)]
        assert await _tool_calls(http, proxy.base_url) == {"ok": float(TIMES)}


async def test_a_client_that_leaves_before_its_answer_is_counted_cancelled(tapped, tmp_path):
    """The other side of the rule: a relayed `tools/call` whose SSE answer the backend's gateway holds
    back, left by its client once the stream opened: `cancelled`, not ok."""
    tapped.held_back.add("tools/call")
    async with running_proxy(tapped.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        session = await open_session(http, proxy.url, None)
        headers = {
            "Content-Type": "application/json",
            "Accept": ACCEPT,
            "Mcp-Session-Id": session,
            "MCP-Protocol-Version": "2025-11-25",
        }
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "greet", "arguments": {"name": "gone"}}}
        async with http.post(proxy.url, json=call, headers=headers) as response:
            assert (response.status, response.headers["Content-Type"]) == (200, "text/event-stream")
        deadline = asyncio.get_running_loop().time() + 10
        while (counts := await _tool_calls(http, proxy.base_url)) == {}:
            assert asyncio.get_running_loop().time() < deadline, "the call that was left was never counted"
            await asyncio.sleep(0.05)
        assert counts == {"cancelled": 1.0}
