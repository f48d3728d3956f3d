"""The session face checks `MCP-Protocol-Version` after `initialize` (MCP 2025-11-25, Streamable
HTTP: an invalid or unsupported version gets 400 Bad Request; docs/decisions.md §42): v1 clients
translated to the benchmark's modern upstream (in process)."""

from __future__ import annotations

import aiohttp
import pytest
from session_support import SessionCaller
from support import running_proxy

from proxy.bench.upstream import create_app as create_upstream


@pytest.fixture
async def upstream_url(aiohttp_server):
    server = await aiohttp_server(create_upstream("modern", poll_interval_ms=20))
    return str(server.make_url("/mcp"))


@pytest.fixture
async def caller(upstream_url, tmp_path):
    async with running_proxy(upstream_url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        session = SessionCaller(http, proxy.url)
        answer = await session.initialize()
        assert answer["result"]["protocolVersion"] == "2025-11-25"
        yield session


def _refusal(request_id):
    message = "Bad Request: Unsupported protocol version in the MCP-Protocol-Version header (this session uses 2025-11-25)"
    answer = {"jsonrpc": "2.0", "error": {"code": -32600, "message": message}}
    return {**answer, "id": request_id, "_status": 400} if request_id is not None else answer


@pytest.mark.parametrize("version", ["2099-01-01", "garbage", "2025-06-18", "2026-07-28", ""])
async def test_a_request_with_another_protocol_version_gets_400(caller, version):
    answer = await caller.call("tools/list", headers={"MCP-Protocol-Version": version})
    assert answer == _refusal(answer["id"])
    assert answer["id"] == caller._id


async def test_get_and_delete_with_another_protocol_version_get_400(caller):
    for method in ("GET", "DELETE"):
        headers = {**caller.headers(), "Accept": "text/event-stream", "MCP-Protocol-Version": "2099-01-01"}
        async with caller.http.request(method, caller.url, headers=headers) as response:
            assert (method, response.status) == (method, 400)  # before reading: a stream that opened would not end
            assert await response.json() == _refusal(None)
    # The session was not ended by the refused DELETE.
    assert (await caller.call("tools/list"))["_status"] == 200


async def test_the_negotiated_version_or_none_is_served(caller):
    named = await caller.call("tools/list")
    assert named["_status"] == 200 and [t["name"] for t in named["result"]["tools"]] == ["echo", "nowork", "sleep", "progress"]
    headers = caller.headers()
    del headers["MCP-Protocol-Version"]
    body = {"jsonrpc": "2.0", "id": 99, "method": "tools/list", "params": {}}
    async with caller.http.post(caller.url, json=body, headers=headers) as response:
        assert response.status == 200
        assert (await response.json())["result"] == named["result"]
