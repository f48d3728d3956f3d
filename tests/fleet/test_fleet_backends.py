"""Several backends behind one proxy (docs/behaviour.md §6 "Task ids"), with real servers:
new work is spread by weight, and every later call of a task, an MRTR exchange or a session goes
back to the backend it started on — translated (modern clients, v1 backends), relayed with sealed
session ids (v1 clients, v1 backends) and relayed with sealed task ids and request states (modern
clients, v2-modern backends)."""

from __future__ import annotations

import re

import aiohttp
import pytest
from session_support import SessionCaller
from support import TEST_KEY, Caller, running_proxy, wait_for_input

from translators.errors import NOT_ISSUED, UNKNOWN_TASK
from translators.sealing import ANONYMOUS, PLAIN_TASK_IDS, RELAY_SESSION, RELAY_STATE, Keyring

DOES_NOT_UNSEAL = f"{UNKNOWN_TASK}: {NOT_ISSUED}"

pytestmark = pytest.mark.peers

KEYRING = Keyring(TEST_KEY)
NAME_ANSWER = {"action": "accept", "content": {"name": "Alice"}}
V2_SERVER_INFO = {"io.modelcontextprotocol/serverInfo": {"name": "mcp-tasks-proxy-reference-v2", "version": "4.1.4"}}


def _backend(task_id: str) -> tuple[str, str]:
    """(backend, upstream session) sealed in a task id the proxy handed out."""
    ref = KEYRING.unseal_task_id(task_id, ANONYMOUS)
    return ref.backend, ref.session


async def test_modern_clients_over_two_v1_backends_by_weight(reference_v1_server, second_v1_server, tmp_path):
    upstream = [{"name": "a", "url": reference_v1_server.url, "weight": 2}, {"name": "b", "url": second_v1_server.url}]
    async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        created = [
            (await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": f"t{i}"}})).result
            for i in range(6)
        ]
        assert [_backend(c["taskId"])[0] for c in created] == ["a", "b", "a", "a", "b", "a"]
        assert all(_backend(c["taskId"])[1] for c in created)  # translated: each on an upstream session
        finals = [await caller.poll(c["taskId"]) for c in created]
        assert [f["result"]["content"][0]["text"] for f in finals] == [f"computed t{i}" for i in range(6)]

        # An MRTR retry goes back to the backend holding its exchange, whichever the router would pick.
        for expected in ("a", "b"):
            round1 = (await caller.call("tools/call", {"name": "test_tool_with_task"})).result
            exchange, backend = KEYRING.unseal_request_state(round1["requestState"], ANONYMOUS, 0)
            assert backend == expected
            task = (
                await caller.call(
                    "tools/call",
                    {
                        "name": "test_tool_with_task",
                        "requestState": round1["requestState"],
                        "inputResponses": {"r1": NAME_ANSWER},
                    },
                )
            ).result
            assert _backend(task["taskId"])[0] == expected
            final = await caller.poll(task["taskId"])
            assert final["result"]["content"] == [{"type": "text", "text": "Hello, Alice! test_tool_with_task finished."}]

        # Questions inside a task and cancels reach the task's backend (picks 9 to 14 of a b a a b a …).
        asking = [
            (await caller.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": f"{n}.txt"}})).result
            for n in ("x", "y", "z")
        ]
        assert [_backend(t["taskId"])[0] for t in asking] == ["a", "a", "b"]
        for task, name in zip(asking, ("x", "y", "z"), strict=False):
            waiting = await wait_for_input(caller, task["taskId"])
            assert list(waiting["inputRequests"]) == ["input-1"]
            ack = await caller.call(
                "tasks/update",
                {"taskId": task["taskId"], "inputResponses": {"input-1": {"action": "accept", "content": {"confirm": True}}}},
            )
            assert ack.result == {"resultType": "complete"}
            assert (await caller.poll(task["taskId"]))["result"]["content"][0]["text"] == f"deleted {name}.txt"
        long = [
            (await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60, "label": "c"}})).result
            for _ in range(3)
        ]
        assert [_backend(t["taskId"])[0] for t in long] == ["a", "a", "b"]
        for task in long:
            assert (await caller.call("tasks/cancel", {"taskId": task["taskId"]})).result == {"resultType": "complete"}
            assert (await caller.poll(task["taskId"]))["status"] == "cancelled"


async def test_v1_clients_relayed_to_two_v1_backends_keep_their_session(reference_v1_server, second_v1_server, tmp_path):
    upstream = [{"name": "a", "url": reference_v1_server.url}, {"name": "b", "url": second_v1_server.url}]
    async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
        clients = [SessionCaller(http, proxy.url) for _ in range(4)]
        for client in clients:
            init = await client.initialize()
            assert init["result"]["serverInfo"]["name"] != "mcp-tasks-proxy"  # relayed: the backend's own answer
        sessions = [KEYRING.unseal(RELAY_SESSION, client.session_id, "") for client in clients]
        assert [(name, plain) for name, _, plain in sessions] == [(n, PLAIN_TASK_IDS) for n in ("a", "b", "a", "b")]
        assert len({upstream_id for _, upstream_id, _ in sessions}) == 4
        task_ids = []
        for i, client in enumerate(clients):
            created = (
                await client.call(
                    "tools/call",
                    {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": f"s{i}"}, "task": {"ttl": 60_000}},
                )
            )["result"]
            task_id = created["task"]["taskId"]
            # the backend's own id (mcp 1.30's form), which it binds to its session (decision 190): the session routes it
            assert re.fullmatch(r"[0-9a-f]{32}:[0-9a-f-]{36}", task_id)
            task_ids.append(task_id)
            result = await client.call("tasks/result", {"taskId": task_id})
            assert result["result"]["content"][0]["text"] == f"computed s{i}"
            assert result["result"]["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task_id}
            listed = (await client.call("tasks/list"))["result"]["tasks"]
            assert [t["taskId"] for t in listed] == [task_id]
        stranger = await clients[2].call("tasks/get", {"taskId": task_ids[0]})  # same backend, another session
        assert (stranger["_status"], stranger["error"]["code"], stranger["error"]["message"]) == (
            200,
            -32602,
            f"Task not found: {task_ids[0]}",  # the backend's own refusal: it binds its tasks to their session
        )
        async with http.get(proxy.url, headers=clients[1].headers()) as stream:
            assert (stream.status, stream.headers["Content-Type"].split(";")[0]) == (200, "text/event-stream")
            assert stream.headers["Mcp-Session-Id"] == clients[1].session_id  # sealed again, never the backend's own
        async with http.delete(proxy.url, headers=clients[1].headers()) as ended:
            assert ended.status == 200
        gone = await clients[1].call("tools/list")
        assert gone["_status"] == 404
        assert (await clients[3].call("tools/list"))["_status"] == 200  # the other session on b lives on
        forged = SessionCaller(http, proxy.url)
        forged.session_id = sessions[0][1]  # a backend's own id, not one the proxy handed out
        assert (await forged.call("tools/list"))["_status"] == 404


async def test_modern_clients_relayed_to_two_v2_backends_get_sealed_ids(reference_v2_server, second_v2_server, tmp_path):
    upstream = [{"name": "a", "url": reference_v2_server.url}, {"name": "b", "url": second_v2_server.url}]
    async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        created = [
            await caller.call("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.2, "label": f"v{i}"}})
            for i in range(4)
        ]
        assert [_backend(c.result["taskId"]) for c in created] == [("a", ""), ("b", ""), ("a", ""), ("b", "")]
        assert [c.headers["Mcp-Name"] for c in created] == [c.result["taskId"] for c in created]
        for i, answer in enumerate(created):
            task_id = answer.result["taskId"]
            final = await caller.poll(task_id)
            assert (final["taskId"], final["result"]["content"][0]["text"]) == (task_id, f"computed v{i}")
            named = await caller.call("tasks/get", {"taskId": task_id}, headers={"Mcp-Name": task_id})
            assert named.result["taskId"] == task_id

        # Input inside a task: tasks/get shows the questions, tasks/update answers them on the right backend.
        asking = [
            (await caller.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": f"{n}.txt"}})).result
            for n in ("x", "y")
        ]
        for task, name in zip(asking, ("x", "y"), strict=False):
            waiting = await wait_for_input(caller, task["taskId"])
            assert waiting["taskId"] == task["taskId"]
            [key] = waiting["inputRequests"]
            ack = await caller.call(
                "tasks/update",
                {"taskId": task["taskId"], "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}}},
            )
            assert ack.result == {"resultType": "complete", "_meta": V2_SERVER_INFO}  # the backend's own ack, relayed
            assert (await caller.poll(task["taskId"]))["result"]["content"][0]["text"] == f"deleted {name}.txt"

        # MRTR before a task: the backend's requestState comes back wrapped with its backend's name.
        for expected in ("a", "b"):
            round1 = (await caller.call("tools/call", {"name": "test_tool_with_task"})).result
            backend, _own_state = KEYRING.unseal(RELAY_STATE, round1["requestState"], ANONYMOUS)
            assert backend == expected
            task = (
                await caller.call(
                    "tools/call",
                    {
                        "name": "test_tool_with_task",
                        "requestState": round1["requestState"],
                        "inputResponses": {"user_name": NAME_ANSWER},
                    },
                )
            ).result
            assert _backend(task["taskId"]) == (expected, "")
            final = await caller.poll(task["taskId"])
            assert final["result"]["content"][0]["text"] == "Hello, Alice! test_tool_with_task finished."

        # Relayed calls are timed per backend: 2 + 1 + 2 tools/call each (tasks, a question, an MRTR pair).
        async with http.get(proxy.base_url + "/metrics") as scraped:
            metrics = await scraped.text()
        for name in "ab":
            assert f'mcp_tasks_proxy_upstream_seconds_count{{backend="{name}",method="tools/call"}} 5.0' in metrics

        # Ids the proxy did not hand out never reach a backend.
        raw = await caller.call("tasks/get", {"taskId": "not-a-sealed-id"})
        assert (raw.status, raw.error["code"], raw.error["message"]) == (400, -32602, DOES_NOT_UNSEAL)
        mallory = Caller(http, proxy.url, authorization="Bearer mallory")
        stolen = await mallory.call("tasks/get", {"taskId": created[0].result["taskId"]})
        assert (stolen.status, stolen.error["code"], stolen.error["message"]) == (400, -32602, DOES_NOT_UNSEAL)
