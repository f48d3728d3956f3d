"""Relay: a v1 (session-wire) client in front of a v1 backend (docs/behaviour.md §3, §6).

Same dialect on both sides: the proxy forwards the bytes; the backend's session id is sealed with
the backend's name, with one backend too (docs/decisions.md §83), and its task ids are its own
(decision 190: the session routes them).
"""

from __future__ import annotations

import asyncio
import re

import aiohttp
import pytest
from session_support import SessionCaller
from support import TEST_KEY, running_proxy

from translators.sealing import PLAIN_TASK_IDS, RELAY_SESSION, Keyring

pytestmark = pytest.mark.peers
KEYRING = Keyring(TEST_KEY)


async def test_a_v1_client_uses_a_v1_server_through_the_relay(tapped, tmp_path):
    async with running_proxy(tapped.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        client = SessionCaller(http, proxy.url)
        client.on_request = lambda message: asyncio.sleep(0, {"action": "accept", "content": {"confirm": True}})
        init = await client.initialize()
        assert init["result"]["serverInfo"]["name"] == "mcp-tasks-proxy-reference-v1"  # the backend answered
        assert init["result"]["capabilities"]["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        assert (await client.call("tools/call", {"name": "greet", "arguments": {"name": "R"}}))["result"]["content"] == [
            {"type": "text", "text": "Hello, R!"}
        ]
        created = (
            await client.call(
                "tools/call", {"name": "confirm_delete", "arguments": {"filename": "r.txt"}, "task": {"ttl": 60000}}
            )
        )["result"]
        task_id = created["task"]["taskId"]
        name, upstream_session, plain = KEYRING.unseal(RELAY_SESSION, client.session_id, "")
        assert (name, plain) == ("main", PLAIN_TASK_IDS)
        assert re.fullmatch(r"[0-9a-f]{32}", upstream_session)  # mcp 1.30's own id inside
        # the backend's own task id (mcp 1.30's form), which it binds to its session itself (decision 190)
        assert re.fullmatch(r"[0-9a-f]{32}:[0-9a-f-]{36}", task_id)
        result = await client.call("tasks/result", {"taskId": task_id})
        assert result["result"]["content"] == [{"type": "text", "text": "deleted r.txt"}]
        assert [r["method"] for r in client.seen_requests] == ["elicitation/create"]
        listed = (await client.call("tasks/list"))["result"]["tasks"]
        assert [t["taskId"] for t in listed] == [task_id]
        async with http.delete(proxy.url, headers=client.headers()) as deleted:
            assert deleted.status == 200
        assert (await client.call("tasks/list"))["_status"] == 404
    assert "initialize" in tapped.methods and "tasks/result" in tapped.methods


async def test_a_backend_configured_sealed_gives_its_sessions_sealed_task_ids(tapped, tmp_path):
    """`session_task_ids = "sealed"` (decision 190): the session's id has two fields, its task ids
    are sealed with backend and session both ways (the backend sees its own), and another session's
    id is refused by the proxy, never reaching the backend."""
    async with (
        running_proxy(tapped.url, tmp_path, main_keys={"session_task_ids": "sealed"}) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client, other = SessionCaller(http, proxy.url), SessionCaller(http, proxy.url)
        await client.initialize()
        await other.initialize()
        name, upstream_session = KEYRING.unseal(RELAY_SESSION, client.session_id, "")
        created = await client.call(
            "tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.1, "label": "S"}, "task": {"ttl": 60000}}
        )
        task_id = created["result"]["task"]["taskId"]
        ref = KEYRING.unseal_task_id(task_id, "")
        assert (name, ref.backend, ref.session) == ("main", "main", upstream_session)
        assert re.fullmatch(r"[0-9a-f]{32}:[0-9a-f-]{36}", ref.task)  # the backend's own id inside
        result = await client.call("tasks/result", {"taskId": task_id})
        assert result["result"]["content"] == [{"type": "text", "text": "computed S"}]
        assert tapped.bodies[-1]["params"] == {"taskId": ref.task}  # opened on its way to the backend
        reached = len(tapped.methods)
        stranger = await other.call("tasks/get", {"taskId": task_id})
        assert (stranger["_status"], stranger["error"]["code"]) == (200, -32602)
        assert stranger["error"]["message"].startswith("Unknown task: the id does not unseal")
        assert len(tapped.methods) == reached
