"""v2-modern clients through the proxy to the reference v1 server (mcp==1.30.0): docs/behaviour.md §4.

Each test drives the proxy over real HTTP; the backend is the real reference server.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from support import REFERENCE_V1_TOOLS, TEST_KEY, Caller, running_proxy

from translators.errors import NOT_ISSUED, UNKNOWN_TASK
from translators.sealing import Keyring, TaskRef

DOES_NOT_UNSEAL = f"{UNKNOWN_TASK}: {NOT_ISSUED}"

pytestmark = pytest.mark.peers

CREATED_FORBIDDEN_KEYS = {"task", "ttl", "pollInterval", "result", "error", "inputRequests", "requestState"}


@pytest.fixture
async def proxy(reference_v1_server, tmp_path: Path):
    async with running_proxy(reference_v1_server.url, tmp_path) as running:
        yield running


@pytest.fixture
async def client(proxy):
    async with aiohttp.ClientSession() as http:
        yield Caller(http, proxy.url)


async def test_server_discover_is_answered_by_the_proxy_with_the_backend_capabilities(client):
    answer = await client.call("server/discover")
    assert answer.status == 200
    assert answer.result == {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}, "logging": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "private",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks-proxy", "version": "0.1.0"}},
    }


async def test_tools_list_drops_execution_and_is_cacheable(client):
    result = (await client.call("tools/list")).result
    assert [t["name"] for t in result["tools"]] == REFERENCE_V1_TOOLS
    assert all("execution" not in t for t in result["tools"])
    assert (result["resultType"], result["ttlMs"], result["cacheScope"]) == ("complete", 0, "private")


async def test_forbidden_tool_is_a_plain_call(client):
    answer = await client.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
    assert answer.status == 200
    assert answer.result == {"content": [{"type": "text", "text": "Hello, Ada!"}], "isError": False, "resultType": "complete"}
    assert "Mcp-Name" not in answer.headers


async def test_optional_tool_with_extension_becomes_a_flat_created_task(client):
    answer = await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.3, "label": "e2e"}})
    created = answer.result
    assert answer.status == 200
    assert answer.headers["Mcp-Name"] == created["taskId"]
    assert created["resultType"] == "task"
    assert created["status"] == "working"
    assert created["ttlMs"] == 3_600_000
    assert created["pollIntervalMs"] == 500
    assert not CREATED_FORBIDDEN_KEYS & created.keys()
    final = await client.poll(created["taskId"])
    assert final["status"] == "completed"
    assert final["taskId"] == created["taskId"]
    assert final["result"] == {"content": [{"type": "text", "text": "computed e2e"}], "isError": False, "resultType": "complete"}
    assert final["resultType"] == "complete"


async def test_optional_tool_without_extension_runs_inline(client):
    answer = await client.call(
        "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "plain"}}, declare=False
    )
    assert answer.result == {"content": [{"type": "text", "text": "computed plain"}], "isError": False, "resultType": "complete"}


async def test_optional_tools_sync_setting_runs_optional_tools_inline(reference_v1_server, tmp_path):
    async with running_proxy(reference_v1_server.url, tmp_path, optional_tools="sync") as proxy, aiohttp.ClientSession() as http:
        answer = await Caller(http, proxy.url).call(
            "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "s"}}
        )
    assert answer.result == {"content": [{"type": "text", "text": "computed s"}], "isError": False, "resultType": "complete"}


async def test_tool_error_on_v1_ends_completed_with_isError(client):
    created = (await client.call("tools/call", {"name": "failing_job"})).result
    final = await client.poll(created["taskId"])
    assert final["status"] == "completed"
    assert final["result"] == {
        "content": [{"type": "text", "text": "failing_job always fails"}],
        "isError": True,
        "resultType": "complete",
    }
    assert "error" not in final


async def test_protocol_error_on_v1_ends_failed_with_error(client):
    created = (await client.call("tools/call", {"name": "protocol_error_job"})).result
    final = await client.poll(created["taskId"])
    assert final["status"] == "failed"
    assert final["statusMessage"] == "protocol_error_job: simulated internal failure"
    assert final["error"] == {"code": -32603, "message": "protocol_error_job: simulated internal failure"}
    assert "result" not in final


async def test_required_tool_without_extension_is_refused_with_32021(client):
    answer = await client.call("tools/call", {"name": "failing_job"}, declare=False)
    assert answer.status == 400
    assert answer.error["code"] == -32021
    assert answer.error["data"] == {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}


async def test_required_without_extension_wait_answers_the_final_result(reference_v1_server, tmp_path):
    async with (
        running_proxy(reference_v1_server.url, tmp_path, required_without_extension="wait") as proxy,
        aiohttp.ClientSession() as http,
    ):
        answer = await Caller(http, proxy.url).call("tools/call", {"name": "failing_job"}, declare=False)
    assert answer.status == 200
    assert answer.result == {
        "content": [{"type": "text", "text": "failing_job always fails"}],
        "isError": True,
        "resultType": "complete",
    }


async def test_cancel_is_acknowledged_and_the_task_ends_cancelled(client):
    created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "c"}})).result
    ack = await client.call("tasks/cancel", {"taskId": created["taskId"]})
    assert (ack.status, ack.result) == (200, {"resultType": "complete"})
    final = await client.poll(created["taskId"])
    assert final["status"] == "cancelled"
    assert not {"result", "error", "inputRequests"} & final.keys()
    again = await client.call("tasks/cancel", {"taskId": created["taskId"]})
    assert (again.status, again.result) == (200, {"resultType": "complete"})


async def test_update_without_captured_requests_is_acknowledged(client):
    created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "u"}})).result
    ack = await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": {"nope": {"action": "accept"}}})
    assert (ack.status, ack.result) == (200, {"resultType": "complete"})


async def test_task_ids_of_another_principal_are_unknown(proxy):
    async with aiohttp.ClientSession() as http:
        alice = Caller(http, proxy.url, authorization="Bearer alice")
        bob = Caller(http, proxy.url, authorization="Bearer bob")
        created = (await alice.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "a"}})).result
        for method in ("tasks/get", "tasks/cancel", "tasks/update"):
            answer = await bob.call(method, {"taskId": created["taskId"]})
            assert (answer.status, answer.error["code"], answer.error["message"]) == (
                400,
                -32602,
                DOES_NOT_UNSEAL,
            )
        assert (await alice.poll(created["taskId"]))["status"] == "completed"


async def test_a_task_id_survives_a_proxy_restart(reference_v1_server, tmp_path):
    async with aiohttp.ClientSession() as http:
        async with running_proxy(reference_v1_server.url, tmp_path) as first:
            created = (
                await Caller(http, first.url).call(
                    "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": "r"}}
                )
            ).result
        async with running_proxy(reference_v1_server.url, tmp_path) as second:
            final = await Caller(http, second.url).poll(created["taskId"])
    assert final["status"] == "completed"
    assert final["result"]["content"] == [{"type": "text", "text": "computed r"}]


async def test_task_scope_gives_each_task_its_own_upstream_session(reference_v1_server, tmp_path):
    keyring = Keyring(TEST_KEY)
    async with (
        running_proxy(reference_v1_server.url, tmp_path, v1_session_scope="task") as proxy,
        aiohttp.ClientSession() as http,
    ):
        caller = Caller(http, proxy.url)
        ids = [
            (await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": str(i)}})).result[
                "taskId"
            ]
            for i in range(2)
        ]
        finals = [await caller.poll(i) for i in ids]
    refs = [keyring.unseal_task_id(i, "anonymous") for i in ids]
    assert refs[0].session != refs[1].session
    assert [f["result"]["content"][0]["text"] for f in finals] == ["computed 0", "computed 1"]


async def test_principal_scope_shares_one_upstream_session(client):
    keyring = Keyring(TEST_KEY)
    ids = [
        (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": str(i)}})).result["taskId"]
        for i in range(2)
    ]
    refs: list[TaskRef] = [keyring.unseal_task_id(i, "anonymous") for i in ids]
    assert refs[0].session == refs[1].session != ""
    assert refs[0].backend == "main"


async def test_removed_methods_answer_32601_with_404(client):
    for method in ("tasks/result", "tasks/list"):
        answer = await client.call(method, {"taskId": "x"} if method == "tasks/result" else {})
        assert (answer.status, answer.error["code"]) == (404, -32601)


async def test_task_methods_without_extension_answer_32021(client):
    created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "g"}})).result
    for method in ("tasks/get", "tasks/update", "tasks/cancel"):
        answer = await client.call(method, {"taskId": created["taskId"]}, declare=False)
        assert (answer.status, answer.error["code"]) == (400, -32021)
