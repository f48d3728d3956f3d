"""Every result on the modern face, nested ones included, passes the official schemas.

A v2-modern client (plain HTTP JSON-RPC, `support.Caller`) drives the proxy in front of the
reference v1 server (mcp==1.30.0) through every kind of answer. Each result is checked with the
zod schemas of the MCP project's own packages (npm `@modelcontextprotocol/ext-tasks` 0.2.2 and
`@modelcontextprotocol/core`, pinned in `proxy/demo/node_packages.py`; `schemas.validate_official`),
and as the 2026-07-28 definition too (`schemas.validate`: the official schemas and the rules they
leave open, e.g. `resultType`, `cacheScope` and `ttlMs`, which core's schemas, shared with
2025-11-25, do not require; plus the JSON Schema where `shared/schemas/` is present).

The official Tasks client parses a completed task's inlined `result` as a `CallToolResult`
(`CallToolResultV2Schema`: `resultType` "complete" or "input_required"), so each inlined result is
checked as one on its own, like the envelope around it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from schemas import MCP_2025_11_25, MCP_2026_07_28, check_official, validate, validate_official
from support import Caller, running_proxy

pytestmark = pytest.mark.peers

CORE_2026 = MCP_2026_07_28


@pytest.fixture
async def client(reference_v1_server, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        yield Caller(http, proxy.url)


def check_task_answer(result: dict[str, Any]) -> None:
    """A `tasks/get` answer: the envelope, and the inlined result or error on its own."""
    validate_official(result, "GetTaskResultV2Schema")
    validate_official(result, "DetailedTaskV2Schema")
    if result["status"] == "completed":
        validate_official(result["result"], "CallToolResultV2Schema")
        validate_official(result["result"], "CallToolResultSchema")
        validate(result["result"], CORE_2026, "CallToolResult")
    elif result["status"] == "failed":
        validate_official(result["error"], "ErrorV2Schema")
    elif result["status"] == "input_required":
        validate_official(result["inputRequests"], "InputRequestsV2Schema")


async def task_until(client: Caller, task_id: str, status: str, *, inputs: int = 0, timeout: float = 20) -> dict[str, Any]:
    """Poll `tasks/get` until `status` (with at least `inputs` input requests), checking every answer."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = (await client.call("tasks/get", {"taskId": task_id})).result
        check_task_answer(result)
        if result["status"] == status and len(result.get("inputRequests") or {}) >= inputs:
            return result
        assert asyncio.get_running_loop().time() < deadline, f"task stayed {result['status']}"
        await asyncio.sleep(0.1)


async def create(client: Caller, name: str, arguments: dict[str, Any] | None = None) -> str:
    """Call a task tool; the flat `CreateTaskResult` is checked and its task id returned."""
    created = (await client.call("tools/call", {"name": name, "arguments": arguments or {}})).result
    validate_official(created, "CreateTaskResultV2Schema")
    assert created["resultType"] == "task"
    return created["taskId"]


def test_the_validator_refuses_a_result_without_result_type():
    # The helper itself: the official CallToolResult of 2026-07-28 needs resultType.
    assert check_official({"content": []}, "CallToolResultV2Schema") == (
        '<root>: Invalid input ([resultType: Invalid input: expected "complete"] or '
        '[resultType: Invalid input: expected "input_required"])'
    )
    assert check_official({"content": [], "resultType": "complete"}, "CallToolResultV2Schema") is None
    assert check_official({}, "NoSuchSchema") == 'unknown schema "NoSuchSchema"'


async def test_discover_tools_list_and_a_plain_call_pass_the_official_schemas(client):
    discover = (await client.call("server/discover")).result
    validate_official(discover, "DiscoverResultSchema")
    validate(discover, CORE_2026, "DiscoverResult")
    tools = (await client.call("tools/list")).result
    validate_official(tools, "ListToolsResultSchema")
    validate(tools, CORE_2026, "ListToolsResult")
    for tool in tools["tools"]:
        validate_official(tool, "ToolV2Schema")
    plain = (await client.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})).result
    validate_official(plain, "CallToolResultV2Schema")
    validate(plain, CORE_2026, "CallToolResult")


async def test_a_task_working_then_completed_passes_the_official_schemas(client):
    task_id = await create(client, "slow_compute", {"seconds": 1, "label": "schemas"})
    await task_until(client, task_id, "working")
    final = await task_until(client, task_id, "completed")
    assert final["result"] == {
        "content": [{"type": "text", "text": "computed schemas"}],
        "isError": False,
        "resultType": "complete",
    }


async def test_a_tool_error_completed_with_is_error_passes_the_official_schemas(client):
    final = await task_until(client, await create(client, "failing_job"), "completed")
    assert final["result"] == {
        "content": [{"type": "text", "text": "failing_job always fails"}],
        "isError": True,
        "resultType": "complete",
    }


async def test_a_failed_task_with_its_error_passes_the_official_schemas(client):
    final = await task_until(client, await create(client, "protocol_error_job"), "failed")
    assert final["error"] == {"code": -32603, "message": "protocol_error_job: simulated internal failure"}


async def test_a_question_its_update_ack_and_the_answer_pass_the_official_schemas(client):
    task_id = await create(client, "confirm_delete", {"filename": "s.txt"})
    waiting = await task_until(client, task_id, "input_required", inputs=1)
    assert list(waiting["inputRequests"]) == ["input-1"]
    responses = {"input-1": {"action": "accept", "content": {"confirm": True}}}
    validate_official(responses, "InputResponsesV2Schema")
    ack = (await client.call("tasks/update", {"taskId": task_id, "inputResponses": responses})).result
    validate_official(ack, "UpdateTaskResultV2Schema")
    final = await task_until(client, task_id, "completed")
    assert final["result"] == {"content": [{"type": "text", "text": "deleted s.txt"}], "isError": False, "resultType": "complete"}


async def test_a_cancel_ack_and_the_cancelled_task_pass_the_official_schemas(client):
    task_id = await create(client, "slow_compute", {"seconds": 60, "label": "c"})
    ack = (await client.call("tasks/cancel", {"taskId": task_id})).result
    validate_official(ack, "CancelTaskResultV2Schema")
    await task_until(client, task_id, "cancelled")


async def test_an_mrtr_round_and_the_task_it_creates_pass_the_official_schemas(client):
    round1 = (await client.call("tools/call", {"name": "test_tool_with_task"})).result
    validate_official(round1, "InputRequiredCallToolResultV2Schema")
    validate_official(round1, "CallToolResultV2Schema")
    validate(round1, CORE_2026, "InputRequiredResult")
    responses = {"r1": {"action": "accept", "content": {"name": "Ada"}}}
    second = (
        await client.call(
            "tools/call", {"name": "test_tool_with_task", "requestState": round1["requestState"], "inputResponses": responses}
        )
    ).result
    validate_official(second, "CreateTaskResultV2Schema")
    final = await task_until(client, second["taskId"], "completed")
    assert final["result"]["content"] == [{"type": "text", "text": "Hello, Ada! test_tool_with_task finished."}]


async def test_a_v2_session_backends_inlined_result_gets_result_type_on_the_modern_face(tmp_path):
    # The minimal v2-session peer inlines its tool results without resultType (session wire).
    from peers.v2_session_server import start as start_v2_session_peer

    runner, url = await start_v2_session_peer("127.0.0.1", 0)
    try:
        async with running_proxy(url, tmp_path) as proxy, aiohttp.ClientSession() as http:
            client = Caller(http, proxy.url)
            final = await task_until(client, await create(client, "slow_compute", {"seconds": 0.2, "label": "vs"}), "completed")
    finally:
        await runner.cleanup()
    assert final["result"] == {"content": [{"type": "text", "text": "computed vs"}], "isError": False, "resultType": "complete"}


async def test_a_v1_client_gets_the_v2_backends_result_without_result_type(reference_v2_server, tmp_path):
    # FastMCP 4 inlines `"resultType": "complete"` in a completed task's result; 2025-11-25 has no
    # such member, so tasks/result on the v1 face answers the result without it.
    from session_support import SessionCaller

    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        await client.initialize()
        created = (
            await client.call(
                "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "v1"}, "task": {"ttl": 60000}}
            )
        )["result"]
        answer = await client.call("tasks/result", {"taskId": created["task"]["taskId"]})
    validate(answer["result"], MCP_2025_11_25, "CallToolResult")
    assert answer["result"] == {
        "content": [{"type": "text", "text": "computed v1"}],
        "structuredContent": {"result": "computed v1"},
        "isError": False,
        "_meta": {
            "fastmcp": {"wrap_result": True},
            "io.modelcontextprotocol/related-task": {"taskId": created["task"]["taskId"]},
        },
    }
