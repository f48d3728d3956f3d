"""The session face: v1 clients in front of the reference v2 server (docs/behaviour.md §2, §5).

Raw session-wire requests, so every status code and shape is visible; the real mcp 1.30 client
runs against the same pairing in test_v1_client_v2_backend.py.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from schemas import MCP_2025_11_25, validate
from session_support import SessionCaller
from support import running_proxy

from proxy.sse import SseParser

pytestmark = pytest.mark.peers
V1_SCHEMA = MCP_2025_11_25


@pytest.fixture
async def proxy(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as running:
        yield running


@pytest.fixture
async def client(proxy):
    async with aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        await caller.initialize()
        yield caller


async def test_initialize_is_answered_by_the_proxy_with_v1_task_capabilities(proxy):
    async with aiohttp.ClientSession() as http:
        caller = SessionCaller(http, proxy.url)
        answer = await caller.initialize()
    result = answer["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    assert result["serverInfo"] == {"name": "mcp-tasks-proxy", "version": "0.1.0"}
    assert caller.session_id and len(caller.session_id) > 20
    validate(result, V1_SCHEMA, "InitializeResult")


async def test_tools_list_shows_each_tools_task_support(client):
    result = (await client.call("tools/list"))["result"]
    support = {t["name"]: t["execution"]["taskSupport"] for t in result["tools"]}
    assert support["greet"] == "forbidden"
    assert support["slow_compute"] == "optional"
    assert support["failing_job"] == support["confirm_delete"] == "required"
    assert "resultType" not in result and "ttlMs" not in result
    validate(result, V1_SCHEMA, "ListToolsResult")


async def test_requests_without_or_with_unknown_sessions(proxy):
    async with aiohttp.ClientSession() as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/list", "params": {}}
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        missing = await http.post(proxy.url, json=body, headers=headers)
        assert missing.status == 400
        assert (await missing.json())["error"]["message"].startswith("Bad Request: Missing session ID")
        unknown = await http.post(proxy.url, json=body, headers={**headers, "Mcp-Session-Id": "forged"})
        assert (unknown.status, (await unknown.json())["error"]["message"]) == (404, "Session not found")


async def test_a_session_of_another_principal_is_unknown(proxy):
    async with aiohttp.ClientSession() as http:
        alice = SessionCaller(http, proxy.url, authorization="Bearer alice")
        await alice.initialize()
        mallory = SessionCaller(http, proxy.url, authorization="Bearer mallory")
        mallory.session_id = alice.session_id
        answer = await mallory.call("tasks/list")
    assert answer["_status"] == 404


async def test_delete_ends_the_session(client):
    async with client.http.delete(client.url, headers=client.headers()) as response:
        assert response.status == 200
    assert (await client.call("tasks/list"))["_status"] == 404


async def test_one_get_stream_per_session_and_status_notifications_on_it(client):
    headers = client.headers({"Accept": "text/event-stream"})
    first = await client.http.get(client.url, headers=headers)
    assert first.status == 200
    second = await client.http.get(client.url, headers=headers)
    assert second.status == 409
    second.release()
    created = (
        await client.call(
            "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "n"}, "task": {"ttl": 60000}}
        )
    )["result"]
    task_id = created["task"]["taskId"]
    for _ in range(50):
        status = (await client.call("tasks/get", {"taskId": task_id}))["result"]["status"]
        if status == "completed":
            break
        await asyncio.sleep(0.1)
    parser = SseParser()
    notes: list[dict] = []

    async def read() -> None:
        async for chunk in first.content.iter_any():
            notes.extend(json.loads(e.data) for e in parser.feed(chunk))
            if any(n["params"]["status"] == "completed" for n in notes):
                return

    await asyncio.wait_for(read(), 5)
    first.close()  # the client goes away; the proxy frees the session's stream slot
    await asyncio.sleep(0.2)
    completed = [n for n in notes if n["params"]["status"] == "completed"]
    assert completed[0]["method"] == "notifications/tasks/status"
    assert completed[0]["params"]["taskId"] == task_id
    validate(completed[0]["params"], V1_SCHEMA, "TaskStatusNotificationParams")
    replay = await client.http.get(client.url, headers={**headers, "Last-Event-ID": "0"})
    frames = b""

    async def first_event() -> None:
        nonlocal frames
        async for chunk in replay.content.iter_any():
            frames += chunk
            if b"\n\n" in frames:
                return

    await asyncio.wait_for(first_event(), 5)
    replay.release()
    assert b"notifications/tasks/status" in frames


@pytest.mark.parametrize("ttl", [-5, 0, 10**15, "soon", None])
async def test_odd_ttl_hints_are_harmless(client, ttl):
    task = {} if ttl is None else {"ttl": ttl}
    created = await client.call("tools/call", {"name": "greet", "arguments": {"name": "t"}, "task": task})
    assert created["error"]["code"] == -32601  # greet cannot be a task, whatever the ttl
    made = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "t"}, "task": task}))[
        "result"
    ]
    assert made["task"]["status"] == "working"
    assert isinstance(made["task"]["ttl"], int) and made["task"]["ttl"] > 0
    validate(made, V1_SCHEMA, "CreateTaskResult")


async def test_an_elicitation_in_a_task_reaches_the_client_during_tasks_result(client):
    async def answer(message):
        assert message["method"] == "elicitation/create"
        return {"action": "accept", "content": {"confirm": True}}

    client.on_request = answer
    created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "v1.txt"}, "task": {}}))[
        "result"
    ]
    task_id = created["task"]["taskId"]
    result = await client.call("tasks/result", {"taskId": task_id})
    assert result["result"]["content"] == [{"type": "text", "text": "deleted v1.txt"}]
    assert result["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    [asked] = client.seen_requests
    assert asked["params"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
    assert asked["params"]["message"] == "Delete v1.txt?"


async def test_an_error_answer_to_an_elicitation_is_a_cancel(client):
    client.on_request = lambda message: asyncio.sleep(0, ("error", {"code": -1, "message": "no"}))
    created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "e.txt"}, "task": {}}))[
        "result"
    ]
    result = await client.call("tasks/result", {"taskId": created["task"]["taskId"]})
    assert result["result"]["content"][0]["text"] == "e.txt was not deleted (cancel)"


async def test_mrtr_before_the_task_becomes_a_request_on_the_call_stream(client):
    async def answer(message):
        return {"action": "accept", "content": {"name": "Ada"}}

    client.on_request = answer
    created = (await client.call("tools/call", {"name": "test_tool_with_task", "arguments": {}, "task": {}}))["result"]
    assert [r["params"]["message"] for r in client.seen_requests] == ["What is your name?"]
    assert "_meta" not in client.seen_requests[0]["params"]  # no task yet, so no related-task
    result = await client.call("tasks/result", {"taskId": created["task"]["taskId"]})
    assert result["result"]["content"][0]["text"] == "Hello, Ada! test_tool_with_task finished."


async def test_a_client_that_disconnects_during_tasks_result_can_come_back(client):
    created = (
        await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 1.5, "label": "back"}, "task": {}})
    )["result"]
    task_id = created["task"]["taskId"]
    body = {"jsonrpc": "2.0", "id": 99, "method": "tasks/result", "params": {"taskId": task_id}}
    with pytest.raises(asyncio.TimeoutError):
        async with asyncio.timeout(0.3):
            async with client.http.post(client.url, json=body, headers=client.headers()) as response:
                await response.read()
    result = await client.call("tasks/result", {"taskId": task_id})
    assert result["result"]["content"] == [{"type": "text", "text": "computed back"}]


RESULT_SCHEMAS = {
    "initialize": "InitializeResult",
    "tools/list": "ListToolsResult",
    "tasks/get": "GetTaskResult",
    "tasks/result": "CallToolResult",
    "tasks/list": "ListTasksResult",
    "tasks/cancel": "CancelTaskResult",
}


async def test_every_message_to_a_v1_client_validates_against_the_2025_11_25_schema(proxy):
    async with aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        client.on_request = lambda message: asyncio.sleep(0, {"action": "accept", "content": {"confirm": True, "name": "Eve"}})
        await client.initialize()
        await client.call("tools/list")
        await client.call("tools/call", {"name": "greet", "arguments": {"name": "s"}})
        await client.call("tools/call", {"name": "failing_job", "arguments": {}})
        ids = []
        for name, args in (
            ("slow_compute", {"seconds": 0, "label": "s"}),
            ("failing_job", {}),
            ("protocol_error_job", {}),
            ("confirm_delete", {"filename": "s.txt"}),
            ("test_tool_with_task", {}),
        ):
            created = await client.call("tools/call", {"name": name, "arguments": args, "task": {"ttl": 60000}})
            ids.append(created["result"]["task"]["taskId"])
        for task_id in ids:
            await client.call("tasks/get", {"taskId": task_id})
            await client.call("tasks/result", {"taskId": task_id})
            await client.call("tasks/get", {"taskId": task_id})
        await client.call("tasks/list")
        running = await client.call(
            "tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "c"}, "task": {}}
        )
        await client.call("tasks/cancel", {"taskId": running["result"]["task"]["taskId"]})
        await client.call("tasks/cancel", {"taskId": running["result"]["task"]["taskId"]})
        await client.call("tasks/get", {"taskId": "unknown"})
        await client.call("tools/call", {"name": "greet", "arguments": {"name": "s"}, "task": {}})
    errors = 0
    for method, message in client.exchanges:
        if "error" in message:
            errors += 1
            validate(message, V1_SCHEMA, "JSONRPCErrorResponse")
            continue
        validate(message, V1_SCHEMA, "JSONRPCResultResponse")
        result = message["result"]
        assert "resultType" not in result, (method, result)
        if method == "tools/call":
            validate(result, V1_SCHEMA, "CreateTaskResult" if "task" in result else "CallToolResult")
        elif method in RESULT_SCHEMAS:
            validate(result, V1_SCHEMA, RESULT_SCHEMAS[method])
    assert errors == 4  # protocol_error_job's tasks/result, the second cancel, the unknown id, greet with a task
    for request in client.seen_requests:
        validate(request, V1_SCHEMA, "ElicitRequest")
    assert len(client.seen_requests) == 2


async def test_an_error_answer_to_sampling_fails_the_task_with_that_error(proxy):
    async with aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url, capabilities={"sampling": {}})
        await client.initialize()

        async def refuse(message):
            assert message["method"] == "sampling/createMessage"
            return ("error", {"code": -32099, "message": "the user declined"})

        client.on_request = refuse
        created = (await client.call("tools/call", {"name": "summarize", "arguments": {"text": "t"}, "task": {}}))["result"]
        task_id = created["task"]["taskId"]
        answer = await client.call("tasks/result", {"taskId": task_id})
        assert answer["error"] == {"code": -32099, "message": "the user declined"}
        status = (await client.call("tasks/get", {"taskId": task_id}))["result"]
        assert (status["status"], status["statusMessage"]) == ("failed", "the user declined")


async def test_an_idle_session_expires(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path, session_idle_ms=300) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        await client.initialize()
        assert (await client.call("tasks/list"))["_status"] == 200
        await asyncio.sleep(0.5)
        assert (await client.call("tasks/list"))["_status"] == 404
