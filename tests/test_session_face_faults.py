"""The session face (v1 clients, the proxy's own sessions) in front of the reference v2 server
(FastMCP 4) when the network misbehaves: a gateway in front of the backend answering 502 for a
while (docs/decisions.md §29). The gateway is a loopback `ShapingTap` (`tests/tap.py`).
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from session_support import SessionCaller
from support import running_proxy
from tap import ShapingTap

pytestmark = pytest.mark.peers

BAD_GATEWAY_S = 2.0
"""How long the gateway answers 502 (well within the default `reconnect_wait_ms`, 5 s)."""


@pytest.fixture
async def gateway(reference_v2_server):
    tap = await ShapingTap.start(reference_v2_server.url)
    yield tap
    await tap.stop()


async def _bad_gateway_for(tap: ShapingTap, seconds: float) -> None:
    tap.bad_gateway = True
    try:
        await asyncio.sleep(seconds)
    finally:
        tap.bad_gateway = False


async def test_a_blocking_tasks_result_rides_out_a_gateways_502s(gateway, tmp_path):
    async with running_proxy(gateway.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        await client.initialize()
        made = await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1, "label": "through"},
                                                "task": {"ttl": 60000}})
        task_id = made["result"]["task"]["taskId"]
        outage = asyncio.ensure_future(_bad_gateway_for(gateway, BAD_GATEWAY_S))
        await asyncio.sleep(0.1)
        answer = await client.call("tasks/result", {"taskId": task_id})
        await outage
    assert answer["_status"] == 200
    assert answer["result"]["content"] == [{"type": "text", "text": "computed through"}]
    assert answer["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert gateway.refused >= 2


async def test_tasks_get_rides_out_a_gateways_502s(gateway, tmp_path):
    async with running_proxy(gateway.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        await client.initialize()
        made = await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "g"}, "task": {}})
        task_id = made["result"]["task"]["taskId"]
        outage = asyncio.ensure_future(_bad_gateway_for(gateway, BAD_GATEWAY_S))
        await asyncio.sleep(0.1)
        answer = await client.call("tasks/get", {"taskId": task_id})
        await outage
    assert (answer["_status"], answer["result"]["taskId"], answer["result"]["status"]) == (200, task_id, "completed")
    assert gateway.refused >= 2
