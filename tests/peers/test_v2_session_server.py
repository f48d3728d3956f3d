"""The minimal v2-session peer (``tests/peers/v2_session_server.py``) against its wire contract
(``docs/wire.md`` §1 "v2-session", §3, §5): plain aiohttp against the in-process app on 127.0.0.1:0,
plus one run of the script itself."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from peers.v2_session_server import start
from schemas import EXT_TASKS, validate

from proxy.sse import SseParser

EXT = "io.modelcontextprotocol/tasks"
EXT_SCHEMA = EXT_TASKS
DECLARING = {"elicitation": {}, "extensions": {EXT: {}}}
MISSING_EXTENSION = {
    "code": -32021,
    "message": "Missing required client capability",
    "data": {"requiredCapabilities": {"extensions": {EXT: {}}}},
}
ACK = {"resultType": "complete"}
SERVER_SCRIPT = Path(__file__).resolve().with_name("v2_session_server.py")

OnRequest = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class Client:
    """A raw session-wire client: initialize, then POSTs with the session id; answers read from
    JSON or SSE, server→client requests on an SSE answer passed to `on_request` and its result
    POSTed back (the status of that POST is kept in `answer_statuses`)."""

    def __init__(self, http: aiohttp.ClientSession, url: str, capabilities: dict[str, Any]):
        self.http, self.url, self.capabilities = http, url, capabilities
        self.session_id: str | None = None
        self._id = 0
        self.server_requests: list[dict[str, Any]] = []
        self.answer_statuses: list[int] = []
        self.content_types: list[str] = []

    def headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        }
        return {**headers, "Mcp-Session-Id": self.session_id} if self.session_id else headers

    async def initialize(self) -> dict[str, Any]:
        message = await self.message(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": self.capabilities, "clientInfo": {"name": "tests", "version": "1"}},
        )
        async with self.http.post(
            self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers()
        ) as response:
            assert response.status == 202 and await response.read() == b""
        return message

    async def message(
        self, method: str, params: dict[str, Any] | None = None, on_request: OnRequest | None = None
    ) -> dict[str, Any]:
        """The JSON-RPC response message to one request."""
        self._id += 1
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params or {}}
        async with self.http.post(self.url, json=body, headers=self.headers()) as response:
            assert response.status == 200, await response.text()
            if method == "initialize":
                self.session_id = response.headers["Mcp-Session-Id"]
            self.content_types.append(response.content_type)
            if response.content_type == "application/json":
                return await response.json()
            assert response.content_type == "text/event-stream"
            parser = SseParser()
            async for chunk in response.content.iter_any():
                for event in parser.feed(chunk):
                    message = json.loads(event.data)
                    if "method" not in message:
                        assert message["id"] == self._id
                        return message
                    self.server_requests.append(message)
                    assert on_request is not None, f"unexpected server request {message}"
                    answer = {"jsonrpc": "2.0", "id": message["id"], "result": await on_request(message)}
                    async with self.http.post(self.url, json=answer, headers=self.headers()) as posted:
                        self.answer_statuses.append(posted.status)
        raise AssertionError("the SSE stream ended without a response")

    async def result(
        self, method: str, params: dict[str, Any] | None = None, on_request: OnRequest | None = None
    ) -> dict[str, Any]:
        message = await self.message(method, params, on_request)
        assert "result" in message, message
        return message["result"]

    async def error(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        message = await self.message(method, params)
        assert "error" in message, message
        return message["error"]

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, on_request: OnRequest | None = None
    ) -> dict[str, Any]:
        return await self.result("tools/call", {"name": name, "arguments": arguments or {}}, on_request)

    async def wait_for(self, task_id: str, *statuses: str, timeout: float = 5.0) -> dict[str, Any]:
        """Poll `tasks/get` until the task has one of `statuses`; return that `GetTaskResult`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            task = await self.result("tasks/get", {"taskId": task_id})
            validate(task, EXT_SCHEMA, "GetTaskResult")
            if task["status"] in statuses:
                return task
            assert asyncio.get_running_loop().time() < deadline, f"still {task['status']}: {task}"
            await asyncio.sleep(0.05)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    runner, url = await start("127.0.0.1", 0)
    try:
        yield url
    finally:
        await runner.cleanup()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@pytest.fixture
async def client(server: str, http: aiohttp.ClientSession) -> Client:
    caller = Client(http, server, DECLARING)
    await caller.initialize()
    return caller


def _text(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _check_created(created: dict[str, Any]) -> str:
    """A flat v2 `CreateTaskResult`: exactly the handle fields, `working`, this peer's TTL and poll."""
    validate(created, EXT_SCHEMA, "CreateTaskResult")
    assert set(created) == {"resultType", "taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}
    assert (created["resultType"], created["status"], created["ttlMs"], created["pollIntervalMs"]) == (
        "task",
        "working",
        300000,
        200,
    )
    assert re.fullmatch(r"[A-Za-z0-9_-]{32}", created["taskId"])
    assert created["createdAt"] == created["lastUpdatedAt"] and created["createdAt"].endswith("Z")
    return created["taskId"]


def _handle_of(task: dict[str, Any]) -> dict[str, Any]:
    return {k: task[k] for k in ("resultType", "taskId", "ttlMs", "pollIntervalMs", "createdAt")}


# ---- session wire -----------------------------------------------------------------------------


async def test_initialize_mints_a_session_and_announces_the_extension(server, http):
    caller = Client(http, server, DECLARING)
    message = await caller.initialize()
    assert message == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "protocolVersion": "2025-11-25",
            "serverInfo": {"name": "mcp-tasks-proxy-v2-session-peer", "version": "0.1.0"},
            "capabilities": {"tools": {}, "extensions": {EXT: {}}},
        },
    }
    assert re.fullmatch(r"[\x21-\x7e]+", caller.session_id)
    assert await caller.result("ping") == {}


async def test_tools_list_shows_v1_style_task_support(client):
    tools = (await client.result("tools/list"))["tools"]
    assert {t["name"]: t.get("execution") for t in tools} == {
        "greet": None,
        "slow_compute": {"taskSupport": "optional"},
        "failing_job": {"taskSupport": "required"},
        "protocol_error_job": {"taskSupport": "required"},
        "confirm_delete": {"taskSupport": "required"},
        "multi_input": {"taskSupport": "required"},
        "test_tool_with_task": {"taskSupport": "required"},
    }
    assert all(t["inputSchema"]["type"] == "object" for t in tools)


async def test_missing_unknown_and_deleted_sessions(server, http, client):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    async with http.post(server, json=body, headers=headers) as response:
        assert response.status == 400
        assert (await response.json())["error"] == {"code": -32600, "message": "Bad Request: Missing session ID"}
    async with http.post(server, json=body, headers={**headers, "Mcp-Session-Id": "no-such-session"}) as response:
        assert response.status == 404
        assert (await response.json())["error"] == {"code": -32600, "message": "Session not found"}
    async with http.delete(server, headers=client.headers()) as response:
        assert response.status == 200
    async with http.post(server, json=body, headers=client.headers()) as response:
        assert response.status == 404


async def test_get_stream_is_sse_one_per_session_and_ends_with_the_session(server, http, client):
    headers = {**client.headers(), "Accept": "text/event-stream"}
    async with http.get(server, headers=headers) as stream:
        assert (stream.status, stream.content_type) == (200, "text/event-stream")
        async with http.get(server, headers=headers) as second:
            assert second.status == 409
        async with http.delete(server, headers=client.headers()) as deleted:
            assert deleted.status == 200
        assert await asyncio.wait_for(stream.read(), 5) == b""


async def test_unknown_and_removed_methods_are_method_not_found(client):
    for method in ("tasks/result", "tasks/list", "resources/list"):
        assert (await client.error(method, {"taskId": "x"}))["code"] == -32601
    assert await client.error("tasks/get", {"taskId": "nope"}) == {"code": -32602, "message": "Task not found: nope"}
    assert (await client.error("tools/call", {"name": "nope"}))["code"] == -32602


# ---- tools with the extension -----------------------------------------------------------------


async def test_greet_answers_synchronously(client):
    assert await client.call_tool("greet", {"name": "Ada"}) == {**_text("Hello, Ada!"), "resultType": "complete"}


async def test_slow_compute_becomes_a_task_that_completes(client):
    # 2 s: long enough to be read while still working on a loaded machine (0.2 s was not)
    task_id = _check_created(await client.call_tool("slow_compute", {"seconds": 2, "label": "x"}))
    working = await client.result("tasks/get", {"taskId": task_id})
    assert working["status"] == "working" and not {"result", "error", "inputRequests"} & set(working)
    done = await client.wait_for(task_id, "completed")
    assert done == {
        **_handle_of(working),
        "status": "completed",
        "lastUpdatedAt": done["lastUpdatedAt"],
        "result": _text("computed x"),
    }
    assert done["lastUpdatedAt"] > done["createdAt"]


async def test_slow_compute_cancel_acks_and_the_task_ends_cancelled(client):
    task_id = _check_created(await client.call_tool("slow_compute", {"seconds": 30, "label": "long"}))
    assert await client.result("tasks/cancel", {"taskId": task_id}) == ACK
    cancelled = await client.wait_for(task_id, "cancelled")
    assert {"result", "error", "inputRequests"}.isdisjoint(cancelled)
    assert cancelled["statusMessage"] == "Cancelled by request."
    assert await client.result("tasks/cancel", {"taskId": task_id}) == ACK  # terminal: still an ack
    assert (await client.wait_for(task_id, "cancelled"))["status"] == "cancelled"


async def test_failing_job_completes_with_an_is_error_result(client):
    task_id = _check_created(await client.call_tool("failing_job"))
    done = await client.wait_for(task_id, "completed", "failed")
    assert done["status"] == "completed" and "error" not in done
    assert done["result"] == _text("failing_job always fails", is_error=True)


async def test_protocol_error_job_fails_with_an_error(client):
    task_id = _check_created(await client.call_tool("protocol_error_job"))
    failed = await client.wait_for(task_id, "completed", "failed")
    message = "protocol_error_job: simulated internal failure"
    assert (failed["status"], failed["statusMessage"], failed["error"]) == (
        "failed",
        message,
        {"code": -32603, "message": message},
    )
    assert "result" not in failed


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        ({"action": "accept", "content": {"confirm": True}}, "deleted notes.txt"),
        ({"action": "accept", "content": {"confirm": False}}, "notes.txt was not deleted (accept)"),
        ({"action": "decline"}, "notes.txt was not deleted (decline)"),
    ],
)
async def test_confirm_delete_asks_in_the_task_and_takes_the_update(client, answer, text):
    task_id = _check_created(await client.call_tool("confirm_delete", {"filename": "notes.txt"}))
    asking = await client.wait_for(task_id, "input_required")
    [(key, request)] = asking["inputRequests"].items()
    assert isinstance(key, str) and key
    assert request == {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "Delete notes.txt?",
            "requestedSchema": {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]},
        },
    }
    assert await client.result("tasks/update", {"taskId": task_id, "inputResponses": {key: answer}}) == ACK
    done = await client.wait_for(task_id, "completed")
    assert done["result"] == _text(text) and "inputRequests" not in done


async def test_multi_input_asks_twice_at_once_and_accepts_partial_answers(client):
    task_id = _check_created(await client.call_tool("multi_input"))
    asking = await client.wait_for(task_id, "input_required")
    by_message = {r["params"]["message"]: key for key, r in asking["inputRequests"].items()}
    assert set(by_message) == {"value for a", "value for b"} and len(set(by_message.values())) == 2
    value_schema = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}
    assert all(r["params"]["requestedSchema"] == value_schema for r in asking["inputRequests"].values())

    first = {by_message["value for a"]: {"action": "accept", "content": {"value": "1"}}, "never-issued": {"action": "accept"}}
    assert await client.result("tasks/update", {"taskId": task_id, "inputResponses": first}) == ACK
    rest = await client.result("tasks/get", {"taskId": task_id})
    assert rest["status"] == "input_required" and set(rest["inputRequests"]) == {by_message["value for b"]}

    second = {by_message["value for b"]: {"action": "accept", "content": {"value": "2"}}}
    assert await client.result("tasks/update", {"taskId": task_id, "inputResponses": second}) == ACK
    assert (await client.wait_for(task_id, "completed"))["result"] == _text("got both: a=1, b=2")


async def test_test_tool_with_task_asks_on_the_call_stream_before_the_task(client):
    async def on_request(request: dict[str, Any]) -> dict[str, Any]:
        return {"action": "accept", "content": {"name": "Ada"}}

    created = await client.call_tool("test_tool_with_task", on_request=on_request)
    assert client.content_types[-1] == "text/event-stream"
    [request] = client.server_requests
    assert isinstance(request["id"], str)
    assert request == {
        "jsonrpc": "2.0",
        "id": request["id"],
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": "What is your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        },
    }
    assert client.answer_statuses == [202]
    task_id = _check_created(created)
    done = await client.wait_for(task_id, "completed")
    assert done["result"] == _text("Hello, Ada! test_tool_with_task finished.")


async def test_tasks_are_bound_to_their_session(server, http, client):
    task_id = _check_created(await client.call_tool("slow_compute", {"seconds": 5, "label": "mine"}))
    other = Client(http, server, DECLARING)
    await other.initialize()
    for method, params in (("tasks/get", {}), ("tasks/update", {"inputResponses": {}}), ("tasks/cancel", {})):
        assert await other.error(method, {"taskId": task_id, **params}) == {
            "code": -32602,
            "message": f"Task not found: {task_id}",
        }
    assert await client.result("tasks/cancel", {"taskId": task_id}) == ACK


# ---- a session without the extension --------------------------------------------------------


async def test_a_non_declaring_session_gets_no_tasks(server, http):
    plain = Client(http, server, {"elicitation": {}})
    await plain.initialize()
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        assert await plain.error(method, {"taskId": "x", "inputResponses": {}}) == MISSING_EXTENSION
    for tool in ("failing_job", "protocol_error_job", "confirm_delete", "multi_input", "test_tool_with_task"):
        assert await plain.error("tools/call", {"name": tool, "arguments": {"filename": "f"}}) == MISSING_EXTENSION
    assert await plain.call_tool("slow_compute", {"seconds": 0.05, "label": "inline"}) == _text("computed inline")
    assert await plain.call_tool("greet", {"name": "Bo"}) == _text("Hello, Bo!")
    assert plain.server_requests == []


async def test_tools_that_ask_need_the_elicitation_capability(server, http):
    mute = Client(http, server, {"extensions": {EXT: {}}})
    await mute.initialize()
    error = await mute.error("tools/call", {"name": "confirm_delete", "arguments": {"filename": "f"}})
    assert error == {
        "code": -32021,
        "message": "Missing required client capability",
        "data": {"requiredCapabilities": {"elicitation": {"form": {}}}},
    }
    _check_created(await mute.call_tool("failing_job"))


# ---- the script -------------------------------------------------------------------------------


async def test_script_announces_its_url_and_serves(http):
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SERVER_SCRIPT),
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        line = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
        match = re.fullmatch(r"LISTENING (http://127\.0\.0\.1:\d+/mcp)\n", line)
        assert match, line
        caller = Client(http, match.group(1), DECLARING)
        await caller.initialize()
        assert await caller.call_tool("greet", {"name": "script"}) == {**_text("Hello, script!"), "resultType": "complete"}
    finally:
        process.terminate()
        stopped = await asyncio.wait_for(process.wait(), 10)  # asserted after the block: a failure above is not masked
    assert stopped == 0
