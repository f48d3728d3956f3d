"""Held tasks in front of a backend that has tasks (docs/behaviour.md §9, docs/decisions.md §151):
the reference v1 server (`proxy/demo/servers/v1_server.py`, `mcp` 1.30 with tasks; `greet` declares
no task support). Its declarations stand for every client: a `forbidden` tool is not held, for a
2026-07-28 client either, unless the operator names it in `hold_tools`. `hold_after_ms = 0` makes
every call that may be held a held task at once, so what is held does not depend on timing."""

from __future__ import annotations

import aiohttp
import pytest
from session_support import SessionCaller
from support import Caller, running_proxy

pytestmark = pytest.mark.peers
HELLO = {"content": [{"type": "text", "text": "Hello, Ada!"}], "isError": False}


async def test_a_forbidden_tool_of_a_backend_with_tasks_is_answered_as_declared(reference_v1_server, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path, main_keys={"hold_after_ms": 0}) as proxy:
        async with aiohttp.ClientSession() as http:
            answer = await Caller(http, proxy.url).call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
    assert answer.result == {**HELLO, "resultType": "complete"}


async def test_a_tool_named_in_hold_tools_is_held_for_both_faces(reference_v1_server, tmp_path):
    keys = {"hold_after_ms": 0, "hold_tools": ["greet"]}
    async with aiohttp.ClientSession() as http:
        plain = SessionCaller(http, reference_v1_server.url)
        declared = (await plain.initialize())["result"]["capabilities"]
        declared_tools = (await plain.call("tools/list"))["result"]["tools"]
        async with running_proxy(reference_v1_server.url, tmp_path, main_keys=keys) as proxy:
            modern = Caller(http, proxy.url)
            created = (await modern.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})).result
            final = await modern.poll(created["taskId"])
            v1 = SessionCaller(http, proxy.url)
            capabilities = (await v1.initialize())["result"]["capabilities"]
            tools = (await v1.call("tools/list"))["result"]["tools"]
            held = (await v1.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}, "task": {"ttl": 60000}}))[
                "result"
            ]
            task_id = held["task"]["taskId"]
            result = (await v1.call("tasks/result", {"taskId": task_id}))["result"]
    assert (created["resultType"], created["status"]) == ("task", "working")
    assert (final["status"], final["result"]) == ("completed", {**HELLO, "resultType": "complete"})
    assert capabilities == declared  # the backend declares its own tasks
    expected = [{**t, "execution": {"taskSupport": "optional"}} if t["name"] == "greet" else t for t in declared_tools]
    assert tools == expected  # only the named tool is shown with task support
    assert (held["task"]["status"], held["task"]["ttl"]) == ("working", 60000)
    assert result == {**HELLO, "_meta": {"io.modelcontextprotocol/related-task": {"taskId": task_id}}}
