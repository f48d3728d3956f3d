"""Input requests across the bridge: a v1 server's questions reach v2 clients (docs/behaviour.md §4.3–§4.5, §4.8).

The backend is the reference v1 server (mcp==1.30.0): `confirm_delete` asks one question inside its
task, `multi_input` two at once, `test_tool_with_task` one before its task exists (an MRTR round).
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from support import TEST_KEY, Caller, running_proxy, wait_for_input

from proxy.app import STATE
from translators.sealing import Keyring

pytestmark = pytest.mark.peers

CONFIRM_SCHEMA = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
VALUE_SCHEMA = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}


@pytest.fixture
async def proxy(tapped, tmp_path):
    async with running_proxy(tapped.url, tmp_path) as running:
        yield running


@pytest.fixture
async def client(proxy):
    async with aiohttp.ClientSession() as http:
        yield Caller(http, proxy.url)


async def test_a_task_question_is_an_input_request_answered_by_tasks_update(client):
    created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "a.txt"}})).result
    waiting = await wait_for_input(client, created["taskId"])
    assert waiting["inputRequests"] == {
        "input-1": {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "Delete a.txt?", "requestedSchema": CONFIRM_SCHEMA},
        },
    }
    assert waiting["resultType"] == "complete"
    ack = await client.call(
        "tasks/update",
        {"taskId": created["taskId"], "inputResponses": {"input-1": {"action": "accept", "content": {"confirm": True}}}},
    )
    assert (ack.status, ack.result) == (200, {"resultType": "complete"})
    final = await client.poll(created["taskId"])
    assert final["status"] == "completed"
    assert final["result"] == {"content": [{"type": "text", "text": "deleted a.txt"}], "isError": False, "resultType": "complete"}
    assert "inputRequests" not in final


async def test_two_questions_at_once_can_be_answered_one_at_a_time(client):
    created = (await client.call("tools/call", {"name": "multi_input"})).result
    waiting = await wait_for_input(client, created["taskId"], count=2)
    assert waiting["inputRequests"] == {
        "input-1": {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "value for a", "requestedSchema": VALUE_SCHEMA},
        },
        "input-2": {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "value for b", "requestedSchema": VALUE_SCHEMA},
        },
    }
    await client.call(
        "tasks/update",
        {"taskId": created["taskId"], "inputResponses": {"input-1": {"action": "accept", "content": {"value": "A"}}}},
    )
    partial = (await client.call("tasks/get", {"taskId": created["taskId"]})).result
    assert partial["status"] == "input_required"
    assert list(partial["inputRequests"]) == ["input-2"]
    await client.call(
        "tasks/update",
        {"taskId": created["taskId"], "inputResponses": {"input-2": {"action": "accept", "content": {"value": "B"}}}},
    )
    final = await client.poll(created["taskId"])
    assert final["result"]["content"] == [{"type": "text", "text": "got both: a=A, b=B"}]


async def test_unknown_and_answered_keys_are_ignored(client, tapped):
    created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "k.txt"}})).result
    await wait_for_input(client, created["taskId"])
    mark = len(tapped.methods)
    ack = await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": {"nope": {"action": "accept"}}})
    assert ack.result == {"resultType": "complete"}
    assert "response" not in tapped.since(mark)
    still = (await client.call("tasks/get", {"taskId": created["taskId"]})).result
    assert (still["status"], list(still["inputRequests"])) == ("input_required", ["input-1"])
    answer = {"input-1": {"action": "accept", "content": {"confirm": False}}}
    await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": answer})
    mark = len(tapped.methods)
    await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": answer})
    assert "response" not in tapped.since(mark)
    final = await client.poll(created["taskId"])
    assert final["result"]["content"] == [{"type": "text", "text": "k.txt was not deleted (accept)"}]


async def test_answers_after_the_task_ended_are_acknowledged_and_dropped(client, tapped):
    created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "late"}})).result
    await client.poll(created["taskId"])
    mark = len(tapped.methods)
    ack = await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": {"input-1": {"action": "accept"}}})
    assert (ack.status, ack.result) == (200, {"resultType": "complete"})
    assert tapped.since(mark) == []


@pytest.mark.parametrize("responses", [[1, 2], "yes", {"input-1": "accept"}, {"input-1": None}])
async def test_malformed_input_responses_are_32602(client, responses):
    created = (await client.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0, "label": "m"}})).result
    answer = await client.call("tasks/update", {"taskId": created["taskId"], "inputResponses": responses})
    assert (answer.status, answer.error["code"]) == (400, -32602)


async def test_a_question_before_the_task_exists_is_an_mrtr_round(client):
    first = await client.call("tools/call", {"name": "test_tool_with_task"})
    round1 = first.result
    assert round1["resultType"] == "input_required"
    assert "taskId" not in round1
    assert round1["inputRequests"] == {
        "r1": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "What is your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            },
        },
    }
    assert isinstance(round1["requestState"], str)
    second = await client.call(
        "tools/call",
        {
            "name": "test_tool_with_task",
            "requestState": round1["requestState"],
            "inputResponses": {"r1": {"action": "accept", "content": {"name": "Alice"}}},
        },
    )
    created = second.result
    assert created["resultType"] == "task"
    assert not {"requestState", "inputRequests"} & created.keys()
    assert second.headers["Mcp-Name"] == created["taskId"]
    final = await client.poll(created["taskId"])
    assert final["result"]["content"] == [{"type": "text", "text": "Hello, Alice! test_tool_with_task finished."}]


async def test_tampered_foreign_and_expired_request_states_are_32602(tapped, tmp_path):
    async with running_proxy(tapped.url, tmp_path, request_state_ttl_ms=1500) as proxy, aiohttp.ClientSession() as http:
        alice = Caller(http, proxy.url, authorization="Bearer alice")
        bob = Caller(http, proxy.url, authorization="Bearer bob")
        round1 = (await alice.call("tools/call", {"name": "test_tool_with_task"})).result
        state = round1["requestState"]
        answer = {"r1": {"action": "accept", "content": {"name": "Mallory"}}}
        tampered = state[:-2] + ("AA" if state[-2:] != "AA" else "BB")
        for caller, token in (
            (alice, tampered),
            (bob, state),
            (alice, Keyring(TEST_KEY).seal_request_state(("nope",), Keyring(TEST_KEY).principal("Bearer alice"), 2**62)),
        ):
            refused = await caller.call(
                "tools/call", {"name": "test_tool_with_task", "requestState": token, "inputResponses": answer}
            )
            assert (refused.status, refused.error["code"]) == (400, -32602)
        wrong_tool = await alice.call("tools/call", {"name": "greet", "requestState": state, "inputResponses": answer})
        assert (wrong_tool.status, wrong_tool.error["code"]) == (400, -32602)
        await asyncio.sleep(1.6)
        expired = await alice.call("tools/call", {"name": "test_tool_with_task", "requestState": state, "inputResponses": answer})
        assert (expired.status, expired.error["code"]) == (400, -32602)
        assert expired.error["message"] == "Expired requestState: send the original request again"


async def test_a_client_that_never_answers_leaves_the_task_waiting_and_nothing_after_its_ttl(tapped, tmp_path):
    async with running_proxy(tapped.url, tmp_path, task_ttl_ms=2000) as proxy, aiohttp.ClientSession() as http:
        client = Caller(http, proxy.url)
        created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "never.txt"}})).result
        assert created["ttlMs"] == 2000
        await wait_for_input(client, created["taskId"])
        await asyncio.sleep(0.5)
        again = (await client.call("tasks/get", {"taskId": created["taskId"]})).result
        assert (again["status"], list(again["inputRequests"])) == ("input_required", ["input-1"])
        book = proxy.runner.app[STATE].fleet.first.follower.inputs
        ref = Keyring(TEST_KEY).unseal_task_id(created["taskId"], "anonymous")
        assert book.get(ref) is not None
        await asyncio.sleep(2.1)
        assert book.get(ref) is None


async def test_a_dropped_result_stream_is_reopened_without_losing_the_question(tapped, client):
    tapped.cut_after_first_event.add("tasks/result")
    created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "cut.txt"}})).result
    waiting = await wait_for_input(client, created["taskId"])
    assert list(waiting["inputRequests"]) == ["input-1"]
    assert "tasks/result" not in tapped.cut_after_first_event  # the stream really was cut
    mark = len(tapped.methods)
    again = (await client.call("tasks/get", {"taskId": created["taskId"]})).result
    assert list(again["inputRequests"]) == ["input-1"]
    for _ in range(50):  # the proxy re-opens the stream in the background
        if "tasks/result" in tapped.since(mark):
            break
        await asyncio.sleep(0.05)
    assert tapped.since(mark).count("tasks/result") == 1
    await client.call(
        "tasks/update",
        {"taskId": created["taskId"], "inputResponses": {"input-1": {"action": "accept", "content": {"confirm": True}}}},
    )
    final = await client.poll(created["taskId"])
    assert final["result"]["content"] == [{"type": "text", "text": "deleted cut.txt"}]


async def test_upstream_session_declares_exactly_the_clients_input_capabilities(client, tapped):
    mark = len(tapped.methods)
    await client.call("tools/list")  # first call of this capability set opens a session
    inits = [b for b in tapped.bodies[mark:] if b.get("method") == "initialize"]
    assert [b["params"]["capabilities"] for b in inits] == [{"elicitation": {"form": {}}}]
    async with aiohttp.ClientSession() as http:
        plain = Caller(http, client.url, authorization="Bearer no-elicitation")
        body = plain.body("tools/call", {"name": "test_tool_with_task"})
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        }
        import json

        answer = await plain.raw(json.dumps(body), {**plain.headers("tools/call"), "Content-Type": "application/json"})
    inits = [b for b in tapped.bodies[mark:] if b.get("method") == "initialize"]
    assert inits[-1]["params"]["capabilities"] == {}
    # The server never asks a client that did not declare elicitation: no MRTR round, a task whose
    # result says why.
    created = answer.body["result"]
    assert created["resultType"] == "task"
