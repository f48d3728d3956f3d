"""A v2-modern backend that sends a task's status as `notifications/tasks/status` (what servers on
the C# SDK send) where the tasks extension says `notifications/tasks` (docs/wire.md §3.7): a
client relayed to it sees exactly what it sees from a backend that uses the extension's name
(issue 37, defect 10b). Also how the proxy routes and reads either name elsewhere.

The backend is this test's own minimal 2026-07-28 server on a loopback port (no public server of
that kind runs here): `server/discover`, a `tools/call` that creates task `t-1`, and a
`subscriptions/listen` whose SSE answer is the acknowledgement, one status notification of `t-1`
under the configured name, and the listen's end.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from support import Caller, running_proxy

from proxy.sse import SseParser
from translators.multiplex import Route, route_of
from translators.subscriptions import may_need_v2_repair, task_status_named_v2, v2_repaired

SUB = "io.modelcontextprotocol/subscriptionId"
TASK = {"taskId": "t-1", "status": "working", "createdAt": "2026-12-04T10:00:00Z", "lastUpdatedAt": "2026-12-04T10:00:00Z",
        "ttlMs": 60000, "pollIntervalMs": 100}  # fmt: skip
DONE = {**TASK, "status": "completed", "lastUpdatedAt": "2026-12-04T10:00:01Z"}


def _sse(*messages: dict[str, Any]) -> bytes:
    return b"".join(b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in messages)


@pytest.fixture
async def status_backend() -> AsyncIterator[tuple[str, dict[str, str]]]:
    """The backend's URL and its settings (`name`: the method of its status notification)."""
    settings = {"name": "notifications/tasks"}

    async def handle(request: web.Request) -> web.StreamResponse:
        message = await request.json()
        method, request_id = message.get("method"), message.get("id")
        if method == "server/discover":
            result = {"resultType": "complete", "supportedVersions": ["2026-07-28"], "ttlMs": 0, "cacheScope": "private",
                      "capabilities": {"tools": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}}  # fmt: skip
            return web.json_response({"jsonrpc": "2.0", "id": request_id, "result": result})
        if method == "tools/call":
            return web.json_response({"jsonrpc": "2.0", "id": request_id, "result": {"resultType": "task", **TASK}})
        if method == "subscriptions/listen":
            wanted = message["params"]["notifications"]
            body = _sse(
                {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                 "params": {"_meta": {SUB: request_id}, "notifications": wanted}},
                {"jsonrpc": "2.0", "method": settings["name"], "params": {"_meta": {SUB: request_id}, **DONE}},
                {"jsonrpc": "2.0", "id": request_id, "result": {"resultType": "complete", "_meta": {SUB: request_id}}},
            )  # fmt: skip
            return web.Response(body=body, content_type="text/event-stream")
        error = {"code": -32601, "message": f"Method not found: {method}"}
        return web.json_response({"jsonrpc": "2.0", "id": request_id, "error": error}, status=404)

    app = web.Application()
    app.router.add_post("/mcp", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}/mcp", settings
    finally:
        await runner.cleanup()


async def _listen_messages(http: aiohttp.ClientSession, caller: Caller, task_id: str) -> list[dict[str, Any]]:
    body = caller.body("subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
    headers = {**caller.headers("subscriptions/listen"), "Content-Type": "application/json"}
    parser = SseParser()
    messages: list[dict[str, Any]] = []
    async with http.post(caller.url, data=json.dumps(body), headers=headers) as response:
        assert response.status == 200
        async for chunk in response.content.iter_any():
            messages.extend(json.loads(event.data) for event in parser.feed(chunk))
    return messages


@pytest.mark.parametrize("name", ["notifications/tasks", "notifications/tasks/status"])
async def test_a_relayed_client_sees_the_task_status_under_the_extension_s_name(status_backend, tmp_path, name):
    url, settings = status_backend
    settings["name"] = name
    async with running_proxy(url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        created = await caller.call("tools/call", {"name": "work", "arguments": {}}, headers={"Mcp-Name": "work"})
        task_id = created.result["taskId"]
        messages = await _listen_messages(http, caller, task_id)
    listen_id = 2
    assert messages == [
        {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
         "params": {"_meta": {SUB: listen_id}, "notifications": {"taskIds": [task_id]}}},
        {"jsonrpc": "2.0", "method": "notifications/tasks", "params": {"_meta": {SUB: listen_id}, **DONE, "taskId": task_id}},
        {"jsonrpc": "2.0", "id": listen_id, "result": {"resultType": "complete", "_meta": {SUB: listen_id}}},
    ]  # fmt: skip
    assert task_id == "t-1"  # the backend's own id, relayed as it gave it (docs/decisions.md §192)


def test_either_name_is_renamed_to_the_extension_s_and_nothing_else_changes():
    v1_named = {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {"taskId": "a", "status": "working"}}
    assert task_status_named_v2(v1_named) == {**v1_named, "method": "notifications/tasks"}
    assert v1_named["method"] == "notifications/tasks/status"  # the input is not changed
    for other in (
        {"jsonrpc": "2.0", "method": "notifications/tasks", "params": {"taskId": "a"}},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1}},
        {"jsonrpc": "2.0", "id": 1, "result": {}},
    ):
        assert task_status_named_v2(other) is other


def test_a_v2_backend_s_messages_are_repaired_only_where_their_bytes_may_need_it():
    """`v2_repaired`: the status notification's v1 name and the draft-era `-32003`, both at once,
    and nothing else; `may_need_v2_repair` finds every message it would change by its bytes, escaped
    slashes included, and leaves a plain result alone."""
    named = {"jsonrpc": "2.0", "method": "notifications/tasks/status", "params": {"taskId": "a", "status": "working"}}
    legacy = {"jsonrpc": "2.0", "id": 3, "error": {"code": -32003, "message": "input required"}}
    plain = {"jsonrpc": "2.0", "id": 4, "result": {"taskId": "a", "status": "working"}}
    assert [v2_repaired(named), v2_repaired(legacy)] == [
        {**named, "method": "notifications/tasks"},
        {**legacy, "error": {"code": -32021, "message": "input required"}},
    ]
    assert v2_repaired(plain) is plain
    escaped = json.dumps(named).replace("/", "\\/").encode()
    assert json.loads(escaped) == named
    assert [may_need_v2_repair(json.dumps(m).encode()) for m in (named, legacy, plain)] + [may_need_v2_repair(escaped)] == [
        True,
        True,
        False,
        True,
    ]


@pytest.mark.parametrize("name", ["notifications/tasks", "notifications/tasks/status"])
def test_a_stdio_process_s_task_status_goes_to_its_task_under_either_name(name):
    assert route_of({"jsonrpc": "2.0", "method": name, "params": {"taskId": "t-9", "status": "working"}}) == Route("task", "t-9")
