"""v2-session clients (the tasks extension declared in initialize) in front of a v1 and a v2-modern
backend: SEP-2663 semantics on the session wire (docs/behaviour.md §1, §3).

No public v2-session client runs here, so the client is the tests' raw session-wire caller
declaring the extension, which is all a v2-session client is on the wire.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from session_support import SessionCaller
from support import running_proxy

pytestmark = pytest.mark.peers
EXT = "io.modelcontextprotocol/tasks"


@pytest.fixture(params=["reference_v1_server", "reference_v2_server"])
async def client(request, tmp_path):
    server = request.getfixturevalue(request.param)
    async with running_proxy(server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url, capabilities={"elicitation": {}, "extensions": {EXT: {}}})
        caller.on_request = lambda message: asyncio.sleep(0, {"action": "accept", "content": {"name": "Vee", "confirm": True}})
        init = await caller.initialize()
        caller.init_result = init["result"]
        yield caller


async def until(client: SessionCaller, task_id: str, statuses: tuple[str, ...]) -> dict:
    for _ in range(100):
        result = (await client.call("tasks/get", {"taskId": task_id}))["result"]
        if result["status"] in statuses:
            return result
        await asyncio.sleep(0.1)
    raise AssertionError(result)


async def test_initialize_offers_the_extension_not_v1_tasks(client):
    capabilities = client.init_result["capabilities"]
    assert capabilities["extensions"][EXT] == {}
    assert "tasks" not in capabilities


async def test_the_server_decides_and_tasks_get_inlines_the_result(client):
    created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "vs"}}))["result"]
    assert created["resultType"] == "task"
    assert not {"task", "ttl", "pollInterval", "result"} & created.keys()
    final = await until(client, created["taskId"], ("completed",))
    assert final["resultType"] == "complete"
    assert final["result"]["content"] == [{"type": "text", "text": "computed vs"}]
    assert (await client.call("tools/call", {"name": "greet", "arguments": {"name": "V"}}))["result"]["content"] == [
        {"type": "text", "text": "Hello, V!"}
    ]


async def test_input_requests_are_answered_with_tasks_update(client):
    created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "vs.txt"}}))["result"]
    waiting = await until(client, created["taskId"], ("input_required",))
    [(key, request)] = waiting["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    ack = await client.call(
        "tasks/update", {"taskId": created["taskId"], "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}}}
    )
    assert ack["result"]["resultType"] == "complete"
    final = await until(client, created["taskId"], ("completed",))
    assert final["result"]["content"][0]["text"] == "deleted vs.txt"


async def test_a_question_before_the_task_is_a_server_request_on_the_call_stream(client):
    created = (await client.call("tools/call", {"name": "test_tool_with_task", "arguments": {}}))["result"]
    assert [r["params"]["message"] for r in client.seen_requests] == ["What is your name?"]
    assert created["resultType"] == "task"
    final = await until(client, created["taskId"], ("completed",))
    assert final["result"]["content"][0]["text"] == "Hello, Vee! test_tool_with_task finished."


async def test_cancel_is_an_ack_and_removed_methods_are_32601(client):
    created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "c"}}))["result"]
    ack = (await client.call("tasks/cancel", {"taskId": created["taskId"]}))["result"]
    assert ack["resultType"] == "complete"
    assert not {"taskId", "status"} & ack.keys()
    assert (await until(client, created["taskId"], ("cancelled",)))["status"] == "cancelled"
    for method in ("tasks/result", "tasks/list"):
        assert (await client.call(method, {"taskId": created["taskId"]}))["error"]["code"] == -32601


async def test_initialize_shows_logging_and_list_changes_the_proxy_carries_from_a_v1_backend(listing_v1_server, tmp_path):
    # The backend declares logging and tools.listChanged; the proxy carries both to a v2-session
    # client (log messages on each request's stream, list changes on the GET stream: §3, §4.10).
    async with running_proxy(listing_v1_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url, capabilities={"extensions": {EXT: {}}})
        capabilities = (await caller.initialize())["result"]["capabilities"]
    assert capabilities == {"tools": {"listChanged": True}, "logging": {}, "extensions": {EXT: {}}}
