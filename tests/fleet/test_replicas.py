"""Two proxy replicas sharing the sealing key serve each other's task ids for v2-modern clients,
which carry no session (docs/behaviour.md §6 "Task ids"): status, inlined results and cancel work
whichever replica a request reaches. (Input requests and MRTR exchanges are held in the replica
that captured them; see docs/decisions.md.)"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from support import Caller, running_proxy

pytestmark = pytest.mark.peers


async def test_replicas_with_one_key_serve_each_others_task_ids(reference_v1_server, tmp_path):
    async with (
        running_proxy(reference_v1_server.url, tmp_path / "a") as a,
        running_proxy(reference_v1_server.url, tmp_path / "b") as b,
        aiohttp.ClientSession() as http,
    ):
        on_a, on_b = Caller(http, a.url), Caller(http, b.url)
        created = [
            (await on_a.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": f"r{i}"}})).result
            for i in range(3)
        ]
        long_running = (
            await on_a.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "c"}})
        ).result
        finals = [await on_b.poll(task["taskId"]) for task in created]
        assert [f["result"]["content"][0]["text"] for f in finals] == ["computed r0", "computed r1", "computed r2"]
        ack = await on_b.call("tasks/cancel", {"taskId": long_running["taskId"]})
        assert ack.result == {"resultType": "complete"}
        assert (await on_a.poll(long_running["taskId"]))["status"] == "cancelled"
        failing = (await on_b.call("tools/call", {"name": "failing_job"})).result
        await asyncio.sleep(1.2)
        final = await on_a.poll(failing["taskId"])
        assert (final["status"], final["result"]["isError"]) == ("completed", True)
