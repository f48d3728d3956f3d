"""The reference v2 server's streams, spoken to directly on the 2026-07-28 wire (no proxy): what
``report_progress`` sends on its request's answer, and the opt-in ``subscriptions/listen``
(``REFERENCE_V2_LIST_CHANGED=1``) with ``add_tool`` and ``touch_resource`` (``proxy/demo/servers/v2_server.py``).
The proxy's tests rely on these shapes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from support import MODERN, meta

from proxy.sse import SseParser

pytestmark = pytest.mark.peers

LOG_LEVEL = "io.modelcontextprotocol/logLevel"
SUB = "io.modelcontextprotocol/subscriptionId"


def _headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, "Accept": "application/json, text/event-stream"}
    return {**headers, "Mcp-Name": name} if name else headers


async def _answer(
    http: aiohttp.ClientSession, url: str, method: str, params: dict[str, Any], extra_meta: dict[str, Any]
) -> list[dict]:
    """Every message of the answer to one request, in order (one, for a JSON answer)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": {**meta(), **extra_meta}}}
    async with http.post(url, json=body, headers=_headers(method, params.get("name"))) as response:
        if not response.headers["Content-Type"].startswith("text/event-stream"):
            return [await response.json()]
        parser, messages = SseParser(), []
        async for chunk in response.content.iter_any():
            messages.extend(json.loads(event.data) for event in parser.feed(chunk))
        return messages


def _log(level: str) -> dict[str, Any]:
    params = {"level": level, "logger": "report_progress", "data": {"msg": f"report_progress at {level}", "extra": None}}
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}


def _progress(step: int, total: int) -> dict[str, Any]:
    params = {"progressToken": "p", "progress": step, "total": total, "message": f"step {step}"}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


async def test_report_progress_logs_only_at_or_above_the_requests_level(reference_v2_server):
    call = {"name": "report_progress", "arguments": {"count": 2}}
    async with aiohttp.ClientSession() as http:
        leveled = await _answer(http, reference_v2_server.url, "tools/call", call, {"progressToken": "p", LOG_LEVEL: "warning"})
        quiet = await _answer(http, reference_v2_server.url, "tools/call", call, {"progressToken": "p"})
        silent = await _answer(http, reference_v2_server.url, "tools/call", {**call, "arguments": {"count": 0}}, {})
    assert leveled[:-1] == [_progress(1, 2), _progress(2, 2), _log("warning"), _log("error")]
    assert leveled[-1]["result"]["content"] == [{"text": "progress done", "type": "text"}]
    assert quiet[:-1] == [_progress(1, 2), _progress(2, 2)]
    assert [message["result"]["content"] for message in silent] == [[{"text": "progress done", "type": "text"}]]


async def test_without_the_opt_in_nothing_is_listened_for(reference_v2_server):
    async with aiohttp.ClientSession() as http:
        [discovered] = await _answer(http, reference_v2_server.url, "server/discover", {}, {})
        [listen] = await _answer(
            http, reference_v2_server.url, "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, {}
        )
    capabilities = discovered["result"]["capabilities"]
    assert (capabilities["tools"], capabilities["resources"]) == (
        {"listChanged": False},
        {"subscribe": False, "listChanged": False},
    )
    assert listen["error"]["code"] == -32601


async def test_opted_in_listen_streams_carry_list_changes_and_subscribed_updates(listing_v2_server):
    url = listing_v2_server.url
    requested = {"toolsListChanged": True, "resourceSubscriptions": ["reference://notes"]}
    body = {
        "jsonrpc": "2.0",
        "id": "L",
        "method": "subscriptions/listen",
        "params": {"notifications": requested, "_meta": meta()},
    }
    async with aiohttp.ClientSession() as http:
        [discovered] = await _answer(http, url, "server/discover", {}, {})
        async with http.post(url, json=body, headers=_headers("subscriptions/listen")) as stream:
            parser, heard = SseParser(), []

            async def hear(count: int) -> None:
                while len(heard) < count:
                    heard.extend(json.loads(event.data) for event in parser.feed(await stream.content.readany()))

            await asyncio.wait_for(hear(1), 10)
            added = await _answer(http, url, "tools/call", {"name": "add_tool", "arguments": {"name": "from_server_test"}}, {})
            await _answer(http, url, "tools/call", {"name": "touch_resource", "arguments": {"uri": "reference://elsewhere"}}, {})
            await _answer(http, url, "tools/call", {"name": "touch_resource", "arguments": {"uri": "reference://notes"}}, {})
            await asyncio.wait_for(hear(3), 10)
        [called] = await _answer(http, url, "tools/call", {"name": "from_server_test", "arguments": {}}, {})
    capabilities = discovered["result"]["capabilities"]
    assert capabilities["tools"] == {"listChanged": True}
    assert capabilities["resources"] == {"subscribe": True, "listChanged": True}
    assert heard == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {SUB: "L"}, "notifications": requested},
        },
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {"_meta": {SUB: "L"}}},
        {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"_meta": {SUB: "L"}, "uri": "reference://notes"},
        },
    ]
    assert added[-1]["result"]["content"] == [{"text": "added from_server_test", "type": "text"}]
    assert called["result"]["content"] == [{"text": "from_server_test added", "type": "text"}]
