"""The reference v1 server (``proxy/demo/servers/v1_server.py``, mcp 1.30.0) puts the v1 wire of
``docs/wire.md`` §7 "mcp 1.30.0" on the wire, over real HTTP, and survives ``tasks/cancel``.

The client is a deliberately small Streamable HTTP client on plain aiohttp (``_McpSession``): it
initializes, keeps the ``Mcp-Session-Id``, follows the 307 from ``/mcp`` to ``/mcp/``, and reads
both ``application/json`` and SSE answers (CRLF or LF framing, empty priming events skipped).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from support import until
from yarl import URL

from proxy.demo.processes import ServerProcess

pytestmark = pytest.mark.peers

PROTOCOL_VERSION = "2025-11-25"
RELATED_TASK = "io.modelcontextprotocol/related-task"
CLIENT_CAPABILITIES: dict[str, Any] = {
    "elicitation": {"form": {}},
    "tasks": {"list": {}, "cancel": {}, "requests": {"elicitation": {"create": {}}}},
}
STEP_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------------------------
# A minimal Streamable HTTP client
# --------------------------------------------------------------------------------------------


async def _sse_messages(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """Yield the JSON-RPC messages of an SSE body; lines may end in CRLF or LF."""
    data_lines: list[str] = []
    async for raw in resp.content:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line == "":
            if data_lines and "".join(data_lines).strip():
                yield json.loads("\n".join(data_lines))
            data_lines = []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data_lines.append(value[1:] if value.startswith(" ") else value)
    if data_lines and "".join(data_lines).strip():
        yield json.loads("\n".join(data_lines))


class _Answer:
    """The open answer to one POSTed request: a JSON body or an SSE stream of messages."""

    def __init__(self, resp: aiohttp.ClientResponse, request_id: int) -> None:
        self.resp = resp
        self.request_id = request_id
        self._messages = self._iterate()

    async def _iterate(self) -> AsyncIterator[dict[str, Any]]:
        content_type = self.resp.headers.get("Content-Type", "")
        if content_type.startswith("application/json"):
            yield json.loads(await self.resp.read())
        elif content_type.startswith("text/event-stream"):
            async for message in _sse_messages(self.resp):
                yield message
        else:
            raise AssertionError(f"unexpected answer {self.resp.status} {content_type!r}")

    async def next_message(self, timeout: float = STEP_TIMEOUT_S) -> dict[str, Any]:
        """The next message on this answer (a server request, a notification or the response)."""
        return await asyncio.wait_for(self._messages.__anext__(), timeout)

    async def response(self, timeout: float = STEP_TIMEOUT_S) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Read until the response to our request; return it and the messages seen before it."""
        before: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while True:
            message = await self.next_message(max(0.01, deadline - time.monotonic()))
            if message.get("id") == self.request_id and ("result" in message or "error" in message):
                return message, before
            before.append(message)

    def close(self) -> None:
        self.resp.close()


class _McpSession:
    """One MCP session against ``url`` (JSON-RPC over Streamable HTTP, protocol 2025-11-25)."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None
        self.initialize_result: dict[str, Any] = {}
        self._next_id = 0
        self.redirects: list[tuple[int, str]] = []

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
            headers["MCP-Protocol-Version"] = PROTOCOL_VERSION
        return headers

    async def _post(self, body: dict[str, Any]) -> aiohttp.ClientResponse:
        payload = json.dumps(body).encode("utf-8")
        for _ in range(3):
            resp = await self.http.post(self.url, data=payload, headers=self._headers(), allow_redirects=False)
            if resp.status in (307, 308):
                location = resp.headers["Location"]
                self.redirects.append((resp.status, location))
                resp.release()
                self.url = str(resp.url.join(URL(location)))
                continue
            return resp
        raise AssertionError(f"too many redirects: {self.redirects}")

    async def start(self, method: str, params: dict[str, Any] | None = None) -> _Answer:
        """POST a request and return its open answer (read it with ``response``/``next_message``)."""
        self._next_id += 1
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            body["params"] = params
        resp = await self._post(body)
        assert resp.status == 200, f"{method}: HTTP {resp.status} {await resp.text()}"
        return _Answer(resp, self._next_id)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST a request and return its JSON-RPC response message (``result`` or ``error``)."""
        answer = await self.start(method, params)
        try:
            response, _ = await answer.response()
        finally:
            answer.close()
        return response

    async def result(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Like ``request`` but insist on success and return ``result``."""
        response = await self.request(method, params)
        assert "result" in response, f"{method} failed: {response}"
        result: dict[str, Any] = response["result"]
        return result

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> int:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        resp = await self._post(body)
        resp.release()
        return resp.status

    async def respond(self, request_id: Any, result: dict[str, Any]) -> int:
        """POST the client's response to a server request; return the HTTP status."""
        resp = await self._post({"jsonrpc": "2.0", "id": request_id, "result": result})
        resp.release()
        return resp.status

    async def open(self) -> _McpSession:
        answer = await self.start(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": CLIENT_CAPABILITIES,
                "clientInfo": {"name": "reference-v1-tests", "version": "1"},
            },
        )
        self.session_id = answer.resp.headers.get("Mcp-Session-Id")
        response, _ = await answer.response()
        answer.close()
        assert self.session_id, "initialize answered without Mcp-Session-Id"
        self.initialize_result = response["result"]
        assert await self.notify("notifications/initialized") == 202
        return self

    async def close(self) -> None:
        if self.session_id is not None:
            resp = await self.http.delete(self.url, headers=self._headers())
            resp.release()

    # -- task helpers ------------------------------------------------------------------------

    async def create_task(self, tool: str, arguments: dict[str, Any], ttl: int | None = 60000) -> dict[str, Any]:
        task_meta: dict[str, Any] = {} if ttl is None else {"ttl": ttl}
        result = await self.result("tools/call", {"name": tool, "arguments": arguments, "task": task_meta})
        assert set(result) == {"task"}, f"not a CreateTaskResult: {result}"
        task: dict[str, Any] = result["task"]
        return task

    async def wait_status(self, task_id: str, wanted: set[str], timeout: float = STEP_TIMEOUT_S) -> list[str]:
        """Poll ``tasks/get`` until the status is in ``wanted``; return the statuses seen."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = (await self.result("tasks/get", {"taskId": task_id}))["status"]
            if not seen or seen[-1] != status:
                seen.append(status)
            if status in wanted:
                return seen
            await asyncio.sleep(0.1)
        raise AssertionError(f"task {task_id} never reached {wanted}; saw {seen}")


@pytest.fixture
async def mcp(reference_v1_server: ServerProcess) -> AsyncIterator[_McpSession]:
    async with aiohttp.ClientSession() as http:
        session = await _McpSession(http, reference_v1_server.url).open()
        try:
            yield session
        finally:
            await session.close()


def _text_of(result: dict[str, Any]) -> str:
    content = result["content"]
    assert len(content) == 1 and content[0]["type"] == "text", content
    text: str = content[0]["text"]
    return text


def _assert_v1_task_shape(task: dict[str, Any], status: str, ttl: int | None = 60000) -> None:
    expected_keys = {"taskId", "status", "createdAt", "lastUpdatedAt", "pollInterval"}
    if ttl is not None:
        expected_keys.add("ttl")
        assert task["ttl"] == ttl
    assert set(task) - {"statusMessage"} == expected_keys, task
    assert task["status"] == status
    assert task["pollInterval"] == 500
    assert task["createdAt"].endswith("Z") and task["lastUpdatedAt"].endswith("Z")


# --------------------------------------------------------------------------------------------
# Capabilities, tools and plain calls
# --------------------------------------------------------------------------------------------


async def test_initialize_declares_tasks_list_cancel_and_tools_call(mcp: _McpSession) -> None:
    assert mcp.initialize_result["protocolVersion"] == PROTOCOL_VERSION
    assert mcp.initialize_result["capabilities"] == {
        "experimental": {},
        "logging": {},
        "tools": {"listChanged": False},
        "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
    }


async def test_post_to_mcp_redirects_307_to_trailing_slash(mcp: _McpSession, reference_v1_server: ServerProcess) -> None:
    assert mcp.redirects and mcp.redirects[0][0] == 307
    assert mcp.redirects[0][1].endswith("/mcp/")
    assert mcp.url == reference_v1_server.url + "/"


async def test_tools_list_declares_each_tools_task_support(mcp: _McpSession) -> None:
    tools = {tool["name"]: tool for tool in (await mcp.result("tools/list"))["tools"]}
    assert {name: tool.get("execution") for name, tool in tools.items()} == {
        "greet": None,
        "slow_compute": {"taskSupport": "optional"},
        "failing_job": {"taskSupport": "required"},
        "protocol_error_job": {"taskSupport": "required"},
        "confirm_delete": {"taskSupport": "required"},
        "multi_input": {"taskSupport": "required"},
        "report_progress": None,
        "test_tool_with_task": {"taskSupport": "required"},
    }
    assert tools["slow_compute"]["inputSchema"] == {
        "type": "object",
        "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}},
        "required": ["seconds", "label"],
    }


async def test_greet_answers_synchronously(mcp: _McpSession) -> None:
    result = await mcp.result("tools/call", {"name": "greet", "arguments": {"name": "World"}})
    assert result == {"content": [{"type": "text", "text": "Hello, World!"}], "isError": False}


async def test_optional_tool_without_task_answers_synchronously(mcp: _McpSession) -> None:
    result = await mcp.result("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "s"}})
    assert result == {"content": [{"type": "text", "text": "computed s"}], "isError": False}


async def test_task_support_mismatch_is_an_is_error_tool_result_in_mcp_1_30(mcp: _McpSession) -> None:
    forbidden = await mcp.result("tools/call", {"name": "greet", "arguments": {"name": "W"}, "task": {"ttl": 60000}})
    assert forbidden == {
        "content": [{"type": "text", "text": "This tool does not support task-augmented invocation"}],
        "isError": True,
    }
    required = await mcp.result("tools/call", {"name": "failing_job", "arguments": {}})
    assert required == {
        "content": [{"type": "text", "text": "This tool requires task-augmented invocation"}],
        "isError": True,
    }


# --------------------------------------------------------------------------------------------
# Task lifecycles
# --------------------------------------------------------------------------------------------


async def test_task_creation_nests_task_and_result_carries_related_task_meta(mcp: _McpSession) -> None:
    task = await mcp.create_task("slow_compute", {"seconds": 1, "label": "probe"})
    _assert_v1_task_shape(task, "working")
    task_id = task["taskId"]
    seen = await mcp.wait_status(task_id, {"completed"})
    assert seen[-1] == "completed" and set(seen) <= {"working", "completed"}, seen
    completed = await mcp.result("tasks/get", {"taskId": task_id})
    _assert_v1_task_shape(completed, "completed")
    assert completed["createdAt"] == task["createdAt"]
    result = await mcp.result("tasks/result", {"taskId": task_id})
    assert result == {
        "_meta": {RELATED_TASK: {"taskId": task_id}},
        "content": [{"type": "text", "text": "computed probe"}],
        "isError": False,
    }


async def test_task_without_ttl_omits_ttl_in_mcp_1_30(mcp: _McpSession) -> None:
    task = await mcp.create_task("slow_compute", {"seconds": 0, "label": "nottl"}, ttl=None)
    _assert_v1_task_shape(task, "working", ttl=None)


async def test_tool_error_ends_task_completed_with_is_error_result(mcp: _McpSession) -> None:
    task_id = (await mcp.create_task("failing_job", {}))["taskId"]
    seen = await mcp.wait_status(task_id, {"completed", "failed"})
    assert seen[-1] == "completed" and set(seen) <= {"working", "completed"}, seen
    result = await mcp.result("tasks/result", {"taskId": task_id})
    assert result == {
        "_meta": {RELATED_TASK: {"taskId": task_id}},
        "content": [{"type": "text", "text": "failing_job always fails"}],
        "isError": True,
    }


async def test_exception_in_work_fails_task_with_status_message_and_meta_only_result(mcp: _McpSession) -> None:
    task_id = (await mcp.create_task("protocol_error_job", {}))["taskId"]
    seen = await mcp.wait_status(task_id, {"completed", "failed"})
    assert seen[-1] == "failed" and set(seen) <= {"working", "failed"}, seen
    failed = await mcp.result("tasks/get", {"taskId": task_id})
    _assert_v1_task_shape(failed, "failed")
    assert failed["statusMessage"] == "protocol_error_job: simulated internal failure"
    assert await mcp.result("tasks/result", {"taskId": task_id}) == {"_meta": {RELATED_TASK: {"taskId": task_id}}}


# --------------------------------------------------------------------------------------------
# Input: elicitation on the tasks/result stream, and before the task exists
# --------------------------------------------------------------------------------------------


def _assert_task_elicitation(message: dict[str, Any], task_id: str, text: str, schema: dict[str, Any]) -> None:
    assert message["method"] == "elicitation/create"
    assert isinstance(message["id"], str)
    assert message["id"].startswith(f"task-{task_id}-")
    assert message["params"] == {
        "mode": "form",
        "message": text,
        "requestedSchema": schema,
        "_meta": {RELATED_TASK: {"taskId": task_id}},
    }


async def test_task_elicitation_travels_on_tasks_result_stream_and_answer_completes_task(mcp: _McpSession) -> None:
    task_id = (await mcp.create_task("confirm_delete", {"filename": "probe.txt"}))["taskId"]
    assert (await mcp.wait_status(task_id, {"input_required"}))[-1] == "input_required"

    answer = await mcp.start("tasks/result", {"taskId": task_id})
    try:
        assert answer.resp.headers["Content-Type"].startswith("text/event-stream")
        question = await answer.next_message()
        _assert_task_elicitation(
            question,
            task_id,
            "Delete probe.txt?",
            {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]},
        )
        assert await mcp.respond(question["id"], {"action": "accept", "content": {"confirm": True}}) == 202
        response, _ = await answer.response()
    finally:
        answer.close()
    assert response["result"] == {
        "_meta": {RELATED_TASK: {"taskId": task_id}},
        "content": [{"type": "text", "text": "deleted probe.txt"}],
        "isError": False,
    }
    assert (await mcp.result("tasks/get", {"taskId": task_id}))["status"] == "completed"


async def test_declined_confirmation_does_not_delete(mcp: _McpSession) -> None:
    task_id = (await mcp.create_task("confirm_delete", {"filename": "keep.txt"}))["taskId"]
    answer = await mcp.start("tasks/result", {"taskId": task_id})
    try:
        question = await answer.next_message()
        assert await mcp.respond(question["id"], {"action": "decline"}) == 202
        response, _ = await answer.response()
    finally:
        answer.close()
    assert response["result"]["isError"] is False
    assert _text_of(response["result"]) == "keep.txt was not deleted (decline)"


async def test_concurrent_elicitations_arrive_together_before_either_is_answered(mcp: _McpSession) -> None:
    task_id = (await mcp.create_task("multi_input", {}))["taskId"]
    assert (await mcp.wait_status(task_id, {"input_required"}))[-1] == "input_required"
    value_schema = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}

    answer = await mcp.start("tasks/result", {"taskId": task_id})
    try:
        questions = [await answer.next_message(), await answer.next_message()]
        by_text = {q["params"]["message"]: q for q in questions}
        assert set(by_text) == {"value for a", "value for b"}
        for text, question in by_text.items():
            _assert_task_elicitation(question, task_id, text, value_schema)
        # Answer in the opposite order to the one they came in.
        assert await mcp.respond(by_text["value for b"]["id"], {"action": "accept", "content": {"value": "B"}}) == 202
        assert await mcp.respond(by_text["value for a"]["id"], {"action": "accept", "content": {"value": "A"}}) == 202
        response, _ = await answer.response()
    finally:
        answer.close()
    assert _text_of(response["result"]) == "got both: a=A, b=B"
    assert response["result"]["_meta"] == {RELATED_TASK: {"taskId": task_id}}


async def test_pre_task_elicitation_travels_on_tools_call_stream(mcp: _McpSession) -> None:
    answer = await mcp.start("tools/call", {"name": "test_tool_with_task", "arguments": {}, "task": {"ttl": 60000}})
    try:
        question = await answer.next_message()
        assert question["method"] == "elicitation/create"
        assert question["params"] == {
            "mode": "form",
            "message": "What is your name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        }
        assert await mcp.respond(question["id"], {"action": "accept", "content": {"name": "Alice"}}) == 202
        response, _ = await answer.response()
    finally:
        answer.close()
    task = response["result"]["task"]
    _assert_v1_task_shape(task, "working")
    await mcp.wait_status(task["taskId"], {"completed"})
    result = await mcp.result("tasks/result", {"taskId": task["taskId"]})
    assert _text_of(result) == "Hello, Alice! test_tool_with_task finished."


async def test_declined_pre_task_elicitation_ends_with_is_error_result(mcp: _McpSession) -> None:
    answer = await mcp.start("tools/call", {"name": "test_tool_with_task", "arguments": {}, "task": {"ttl": 60000}})
    try:
        question = await answer.next_message()
        assert await mcp.respond(question["id"], {"action": "decline"}) == 202
        response, _ = await answer.response()
    finally:
        answer.close()
    task_id = response["result"]["task"]["taskId"]
    result = await mcp.result("tasks/result", {"taskId": task_id})
    assert result["isError"] is True
    assert _text_of(result) == ("test_tool_with_task: the name question was answered with action 'decline' and no name")


# --------------------------------------------------------------------------------------------
# Cancellation
# --------------------------------------------------------------------------------------------


_WITH_INFO_LINES = (
    "import logging, os, runpy, sys; "
    "logging.getLogger('mcp_tasks_proxy.v1_server').setLevel(logging.INFO); "
    "sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
"""Runs the script named first, as `python <script> ...` would, with the reference server's own
logger at INFO (its `main` sets the root to WARNING): its "task ... was cancelled; its work
stopped" (``v1_sdk_fixes.stop_when_cancelled``) is then on its output."""


@pytest.fixture
def talkative_v1_server() -> Iterator[ServerProcess]:
    """A reference v1 server of the test's own that prints its INFO lines (`_WITH_INFO_LINES`)."""
    from proxy.demo.peers import ensure_peer_env
    from proxy.demo.processes import V1_SERVER_SCRIPT

    argv = [str(ensure_peer_env("mcp-v1")), "-c", _WITH_INFO_LINES, str(V1_SERVER_SCRIPT), "--host", "127.0.0.1", "--port", "0"]
    server = ServerProcess.start(argv)
    try:
        yield server
    finally:
        server.stop()


async def test_cancelled_work_does_not_end_the_session(talkative_v1_server: ServerProcess) -> None:
    server = talkative_v1_server
    async with aiohttp.ClientSession() as http:
        mcp = await _McpSession(http, server.url).open()
        try:
            cancelled_id = (await mcp.create_task("slow_compute", {"seconds": 60, "label": "long"}))["taskId"]
            await asyncio.sleep(0.3)
            cancel = await mcp.result("tasks/cancel", {"taskId": cancelled_id})
            _assert_v1_task_shape(cancel, "cancelled")
            assert "statusMessage" not in cancel

            # The work notices within a poll interval and returns (what mcp 1.30 alone ends the
            # session on); the server says so once it has.
            stopped = f"INFO mcp_tasks_proxy.v1_server: task {cancelled_id} was cancelled; its work stopped"
            await until(lambda: stopped in server.output_tail().splitlines(), "the cancelled work to have returned")
            other_id = (await mcp.create_task("slow_compute", {"seconds": 0.2, "label": "after"}))["taskId"]
            await mcp.wait_status(other_id, {"completed"})
            assert _text_of(await mcp.result("tasks/result", {"taskId": other_id})) == "computed after"

            assert (await mcp.result("tasks/get", {"taskId": cancelled_id}))["status"] == "cancelled"
            assert (await mcp.result("tasks/get", {"taskId": other_id}))["status"] == "completed"
            assert await mcp.result("tasks/result", {"taskId": cancelled_id}) == {
                "_meta": {RELATED_TASK: {"taskId": cancelled_id}}
            }
        finally:
            await mcp.close()
    assert server.output_tail().splitlines() == [f"LISTENING {server.url}", stopped]  # nothing crashed, nothing else logged


async def test_cancelled_work_that_ends_later_does_not_end_the_session(mcp: _McpSession) -> None:
    # mcp 1.30 alone crashes the session when cancelled work returns: here it would return at 1 s.
    cancelled_id = (await mcp.create_task("slow_compute", {"seconds": 1, "label": "short"}))["taskId"]
    await asyncio.sleep(0.2)
    assert (await mcp.result("tasks/cancel", {"taskId": cancelled_id}))["status"] == "cancelled"
    await asyncio.sleep(1.3)
    assert (await mcp.result("tasks/get", {"taskId": cancelled_id}))["status"] == "cancelled"
    other_id = (await mcp.create_task("slow_compute", {"seconds": 0, "label": "next"}))["taskId"]
    await mcp.wait_status(other_id, {"completed"})
    assert _text_of(await mcp.result("tasks/result", {"taskId": other_id})) == "computed next"


async def test_cancelled_task_withdraws_its_unasked_question(mcp: _McpSession) -> None:
    task_id = (await mcp.create_task("confirm_delete", {"filename": "x.txt"}))["taskId"]
    await mcp.wait_status(task_id, {"input_required"})
    assert (await mcp.result("tasks/cancel", {"taskId": task_id}))["status"] == "cancelled"
    await asyncio.sleep(0.5)
    answer = await mcp.start("tasks/result", {"taskId": task_id})
    try:
        response, before = await answer.response()
    finally:
        answer.close()
    assert before == [], "the stopped work's elicitation must not be delivered"
    assert response["result"] == {"_meta": {RELATED_TASK: {"taskId": task_id}}}
    assert (await mcp.result("tasks/get", {"taskId": task_id}))["status"] == "cancelled"
    assert (await mcp.result("tools/call", {"name": "greet", "arguments": {"name": "again"}}))["isError"] is False


async def test_cancel_of_terminal_task_is_invalid_params(mcp: _McpSession) -> None:
    task_id = (await mcp.create_task("slow_compute", {"seconds": 0, "label": "quick"}))["taskId"]
    await mcp.wait_status(task_id, {"completed"})
    response = await mcp.request("tasks/cancel", {"taskId": task_id})
    assert response["error"] == {"code": -32602, "message": "Cannot cancel task in terminal state 'completed'"}


async def test_unknown_task_id_is_invalid_params(mcp: _McpSession) -> None:
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        response = await mcp.request(method, {"taskId": "no-such-task"})
        assert response["error"] == {"code": -32602, "message": "Task not found: no-such-task"}, method


# --------------------------------------------------------------------------------------------
# Sessions
# --------------------------------------------------------------------------------------------


async def test_ending_one_session_leaves_task_creation_working_in_another(reference_v1_server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as http:
        older = await _McpSession(http, reference_v1_server.url).open()
        newer = await _McpSession(http, reference_v1_server.url).open()
        running_id = (await older.create_task("slow_compute", {"seconds": 0.5, "label": "survives"}))["taskId"]
        await newer.close()
        task = await older.create_task("slow_compute", {"seconds": 0, "label": "still works"})
        await older.wait_status(task["taskId"], {"completed"})
        await older.wait_status(running_id, {"completed"})
        assert _text_of(await older.result("tasks/result", {"taskId": running_id})) == "computed survives"
        await older.close()


async def test_tasks_are_scoped_to_the_session_that_created_them(mcp: _McpSession, reference_v1_server: ServerProcess) -> None:
    task_id = (await mcp.create_task("slow_compute", {"seconds": 0, "label": "mine"}))["taskId"]
    async with aiohttp.ClientSession() as http:
        stranger = await _McpSession(http, reference_v1_server.url).open()
        try:
            response = await stranger.request("tasks/get", {"taskId": task_id})
            assert response["error"] == {"code": -32602, "message": f"Task not found: {task_id}"}
            assert (await stranger.result("tasks/list"))["tasks"] == []
        finally:
            await stranger.close()
    listed = (await mcp.result("tasks/list"))["tasks"]
    assert [task["taskId"] for task in listed] == [task_id]
