"""A backend upgraded in place (docs/behaviour.md §2, §6 "Nothing lost"): the v1 server behind the
proxy is stopped and a v2 server starts on the same port. The proxy notices on the first
contradicting answer; tasks that lived only on the old server are unknown (never invented), and
new work reaches the new server, for modern and v1 clients alike."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from session_support import SessionCaller
from support import TEST_KEY, Caller, free_port, running_proxy

from proxy.app import STATE
from proxy.demo.processes import start_reference_v1_server, start_reference_v2_server
from translators.errors import FORGOTTEN, UNKNOWN_TASK
from translators.sealing import ANONYMOUS, Keyring

FORGOTTEN_TASK = f"{UNKNOWN_TASK}: {FORGOTTEN}"

pytestmark = pytest.mark.peers


async def test_a_v1_backend_replaced_by_a_v2_backend_on_the_same_port(tmp_path):
    port = free_port()
    old = start_reference_v1_server(port)
    new = None
    try:
        async with running_proxy(f"http://127.0.0.1:{port}/mcp", tmp_path) as proxy, aiohttp.ClientSession() as http:
            modern = Caller(http, proxy.url)
            before = (
                await modern.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 30, "label": "old"}})
            ).result
            assert before["resultType"] == "task"
            old.stop()
            new = start_reference_v2_server(port)
            lost = await modern.call("tasks/get", {"taskId": before["taskId"]})
            assert (lost.status, lost.error["code"], lost.error["message"]) == (
                400,
                -32602,
                FORGOTTEN_TASK,
            )
            await asyncio.sleep(1.1)  # on-demand probes are at least a second apart
            after = await modern.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "new"}})
            assert after.status == 200, after.body
            assert after.result["resultType"] == "task"
            relayed = after.result["taskId"]
            # FastMCP 4's own id, relayed as it gave it (decision 192)
            assert (len(relayed), Keyring(TEST_KEY).opened_task_id(relayed, ANONYMOUS)) == (43, None)
            headers = {"Mcp-Name": after.result["taskId"]}
            for _ in range(50):
                done = (await modern.call("tasks/get", {"taskId": after.result["taskId"]}, headers=headers)).result
                if done["status"] == "completed":
                    break
                await asyncio.sleep(0.1)
            assert done["result"]["content"][0]["text"] == "computed new"
            v1_client = SessionCaller(http, proxy.url)
            init = await v1_client.initialize()
            assert init["result"]["serverInfo"]["name"] == "mcp-tasks-proxy"  # translated now, no longer relayed
            created = (
                await v1_client.call(
                    "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "v1"}, "task": {}}
                )
            )["result"]
            result = await v1_client.call("tasks/result", {"taskId": created["task"]["taskId"]})
            assert result["result"]["content"][0]["text"] == "computed v1"
    finally:
        old.stop()
        if new is not None:
            new.stop()


async def test_a_backend_replaced_while_idle_is_noticed_within_one_probe_interval(tmp_path):
    port = free_port()
    old = start_reference_v1_server(port)
    new = None
    try:
        async with running_proxy(f"http://127.0.0.1:{port}/mcp", tmp_path, probe_interval_ms=300) as proxy:
            backend = proxy.runner.app[STATE].fleet.first.backend
            assert backend.dialect == "v1"
            await asyncio.to_thread(old.stop)
            new = await asyncio.to_thread(start_reference_v2_server, port)
            for _ in range(50):  # no client request reaches the proxy meanwhile
                if backend.dialect == "v2-modern":
                    break
                await asyncio.sleep(0.1)
            assert backend.dialect == "v2-modern"
    finally:
        old.stop()
        if new is not None:
            new.stop()
