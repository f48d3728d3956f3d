"""The benchmark's fast upstream (`proxy.bench.upstream`) and clients (`proxy.bench.clients`), in process.

The fast upstream must look like a real v1 server to the proxy's probe and to the clients (so the
comparison measures the proxy, not a shortcut), and its modern mode like a v2-modern server.
"""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp import web
from support import running_proxy

from proxy.bench.asking import WrongAnswer, _v1_result, v1_ask, v2_ask
from proxy.bench.clients import ModernClient, SessionClient
from proxy.bench.upstream import create_app

ACCEPT = "application/json, text/event-stream"


@pytest.fixture
async def v1_url(aiohttp_server):
    server = await aiohttp_server(create_app("v1", poll_interval_ms=20))
    return str(server.make_url("/mcp"))


@pytest.fixture
async def modern_url(aiohttp_server):
    server = await aiohttp_server(create_app("modern", poll_interval_ms=20))
    return str(server.make_url("/mcp"))


async def test_session_wire_scenarios(v1_url):
    async with aiohttp.ClientSession() as http:
        client = SessionClient(http, v1_url)
        await client.open()
        assert client.session_id
        assert await client.echo() == 0
        assert await client.lifecycle() == 0
        assert await client.progress() == 100
        tools, _ = await client.request("tools/list", {})
        assert {t["name"]: t.get("execution", {}).get("taskSupport") for t in tools["tools"]} == {
            "echo": None,
            "nowork": "required",
            "sleep": "required",
            "progress": None,
            "ask": "required",
            "wait": None,
        }
        await client.close()


async def test_session_wire_refusals_look_like_mcp_1x(v1_url):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.post(v1_url, data=body, headers=headers) as response:
            assert response.status == 400
            assert (await response.json())["error"]["message"] == "Bad Request: Missing session ID"
        async with http.post(v1_url, data=body, headers={**headers, "Mcp-Session-Id": "nope"}) as response:
            assert response.status == 404
        async with http.post(v1_url, data=body, headers={**headers, "Accept": "application/json"}) as response:
            assert response.status == 406


async def test_tasks_are_bound_to_their_session_and_sleep_stays_working(v1_url):
    async with aiohttp.ClientSession() as http:
        one, two = SessionClient(http, v1_url), SessionClient(http, v1_url)
        await one.open()
        await two.open()
        task_id = await one.create_sleeping(60)
        got, _ = await one.request("tasks/get", {"taskId": task_id})
        assert got["status"] == "working" and got["ttl"] == 600_000
        with pytest.raises(Exception, match="Task not found"):
            await two.request("tasks/get", {"taskId": task_id})
        cancelled, _ = await one.request("tasks/cancel", {"taskId": task_id})
        assert cancelled["status"] == "cancelled"


async def test_get_stream_is_held_once_per_session(v1_url):
    async with aiohttp.ClientSession() as http:
        client = SessionClient(http, v1_url)
        await client.open()
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": client.session_id or ""}
        async with http.get(v1_url, headers=headers) as stream:
            assert stream.status == 200 and stream.headers["Content-Type"] == "text/event-stream"
            async with http.get(v1_url, headers=headers) as second:
                assert second.status == 409
        async with http.delete(v1_url, headers=headers) as deleted:
            assert deleted.status == 200


async def test_modern_wire_scenarios(modern_url):
    async with aiohttp.ClientSession() as http:
        client = ModernClient(http, modern_url)
        assert await client.echo() == 0
        assert await client.lifecycle() == 0
        assert await client.progress() == 100
        discovered, _ = await client.request("server/discover", {})
        assert discovered["capabilities"]["extensions"] == {"io.modelcontextprotocol/tasks": {}}
        async with http.get(modern_url) as response:
            assert response.status == 405


async def test_modern_wire_refuses_a_legacy_initialize(modern_url):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}})
    async with aiohttp.ClientSession() as http:
        async with http.post(modern_url, data=body, headers={"Accept": ACCEPT, "Content-Type": "application/json"}) as response:
            assert response.status == 400
            assert (await response.json())["error"]["code"] == -32022


def test_the_app_serves_both_paths():
    for wire in ("v1", "modern"):
        app = create_app(wire)
        assert isinstance(app, web.Application)
        paths = {r.resource.canonical for r in app.router.routes()}  # type: ignore[union-attr]
        assert paths == {"/mcp", "/mcp/"}


def test_missing_nginx_that_cannot_be_installed_is_reported_not_waited_for(monkeypatch):
    from proxy.bench import targets

    monkeypatch.setattr(targets.shutil, "which", lambda _name: None)
    monkeypatch.setattr(targets.os.path, "exists", lambda _path: False)
    monkeypatch.setattr(targets.os, "geteuid", lambda: 1000)
    with pytest.raises(targets.NginxUnavailable, match="not installed"):
        targets.ensure_nginx()


async def test_ask_asks_one_question_on_the_tasks_result_stream_and_answers_the_reply(v1_url):
    async with aiohttp.ClientSession() as http:
        client = SessionClient(http, v1_url, capabilities={"elicitation": {}})
        await client.open()
        await v1_ask(client, "direct-1")
        created, _ = await client.request("tools/call", {"name": "ask", "arguments": {"text": "two"}, "task": {}})
        task_id = created["task"]["taskId"]
        assert created["task"]["status"] == "working"
        got, _ = await client.request("tasks/get", {"taskId": task_id})
        assert got["status"] == "input_required"
        with pytest.raises(WrongAnswer, match="instead of confirm 'three'"):
            await _v1_result(client, task_id, "three")  # the question reads "confirm two"
        result = await _v1_result(client, task_id, "two")  # asked again on the next stream
        assert result["content"] == [{"type": "text", "text": "two -> yes two"}]
        got, _ = await client.request("tasks/get", {"taskId": task_id})
        assert got["status"] == "completed"
        again, _ = await client.request("tasks/result", {"taskId": task_id})
        assert again["content"] == [{"type": "text", "text": "two -> yes two"}]


@pytest.mark.parametrize("dialect", ["v1", "v2"])
async def test_ask_lifecycles_through_the_proxy(v1_url, tmp_path, dialect):
    async with running_proxy(v1_url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        if dialect == "v1":
            client = SessionClient(http, proxy.url, capabilities={"elicitation": {}})
            await client.open()
            for i in range(3):
                await v1_ask(client, f"relayed-{i}")
        else:
            modern = ModernClient(http, proxy.url, capabilities={"elicitation": {"form": {}}})
            for i in range(3):
                await v2_ask(modern, f"translated-{i}")
