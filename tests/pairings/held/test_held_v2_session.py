"""Held tasks for v2-session clients (the tasks extension declared in `initialize`; docs/behaviour.md
§8): the tests' session-wire caller (no public v2-session client runs here) through the proxy to the
task-less mcp 1.30 server over HTTP and on stdio. The call is translated (`V2SessionCarriage` over
`V2OverV1`), so the held task has the SEP-2663 shapes on the session wire."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from held_support import held_proxy, wait_for_event
from session_support import SessionCaller

pytestmark = pytest.mark.peers
EXT = "io.modelcontextprotocol/tasks"


async def _until(client: SessionCaller, task_id: str, statuses: tuple[str, ...]) -> dict:
    for _ in range(300):
        task = (await client.call("tasks/get", {"taskId": task_id}))["result"]
        if task["status"] in statuses:
            return task
        await asyncio.sleep(0.1)
    raise AssertionError(f"task stayed {task['status']}")


def text(value: str, *, is_error: bool = False) -> dict:
    return {"content": [{"type": "text", "text": value}], "isError": is_error, "resultType": "complete"}


async def test_v2_session_client_lifecycles(untasked, tmp_path):
    table, events = untasked
    async with held_proxy(table, tmp_path / "state") as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url, capabilities={"elicitation": {}, "extensions": {EXT: {}}})
        init = await client.initialize()
        assert EXT in init["result"]["capabilities"]["extensions"]
        fast = (await client.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}}))["result"]
        assert (fast["resultType"], fast["content"]) == ("complete", [{"type": "text", "text": "Hello, Ada!"}])

        created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1.5, "label": "s"}}))[
            "result"
        ]
        assert (created["resultType"], created["status"], created["ttlMs"], created["pollIntervalMs"]) == (
            "task",
            "working",
            3_600_000,
            1000,
        )
        done = await _until(client, created["taskId"], ("completed", "failed", "cancelled"))
        assert (done["status"], done["result"]) == ("completed", text("computed s"))

        failing = (await client.call("tools/call", {"name": "failing_job", "arguments": {"seconds": 1}}))["result"]
        assert (await _until(client, failing["taskId"], ("completed",)))["result"] == text(
            "failing_job always fails", is_error=True
        )
        broken = (await client.call("tools/call", {"name": "protocol_error_job", "arguments": {"seconds": 1}}))["result"]
        failed = await _until(client, broken["taskId"], ("failed",))
        assert failed["error"] == {"code": -32000, "message": "protocol_error_job: simulated internal failure"}

        asking = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "p.txt"}}))["result"]
        task = await _until(client, asking["taskId"], ("input_required",))
        [(key, question)] = task["inputRequests"].items()
        assert (question["method"], question["params"]["message"]) == ("elicitation/create", "Delete p.txt?")
        update = {"taskId": asking["taskId"], "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}}}
        assert (await client.call("tasks/update", update))["result"]["resultType"] == "complete"
        assert (await _until(client, asking["taskId"], ("completed",)))["result"] == text("deleted p.txt")

        slow = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "x"}}))["result"]
        assert (await client.call("tasks/cancel", {"taskId": slow["taskId"]}))["result"]["resultType"] == "complete"
        await wait_for_event(events, {"event": "cancelled", "tool": "slow_compute", "label": "x"})
        assert (await _until(client, slow["taskId"], ("cancelled",)))["status"] == "cancelled"
