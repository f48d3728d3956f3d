"""Bad input never reaches a backend and never crashes the proxy (docs/behaviour.md §2, §6).

The proxy's backend is the reference v1 server behind a recording tap, so each test can assert
that nothing reached the backend after the proxy's own start-up probe.
"""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp import web
from support import TEST_KEY, Caller, free_port, meta, running_proxy

from translators.sealing import Keyring, TaskRef

pytestmark = pytest.mark.peers

JSON_HEADERS = {
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2026-07-28",
    "Accept": "application/json, text/event-stream",
}


@pytest.fixture
async def env(tapped, tmp_path):
    async with running_proxy(tapped.url, tmp_path, max_body_bytes=2048) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        mark = len(tapped.methods)
        yield caller, tapped, mark
        health = await http.get(proxy.base_url + "/healthz")
        assert (health.status, await health.json()) == (200, {"status": "ok"})


def modern_body(method: str = "tools/list", params: dict | None = None, **meta_kwargs) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": {**(params or {}), "_meta": meta(**meta_kwargs)}})


@pytest.mark.parametrize(
    ("data", "code", "answered_id"),
    [
        (b"{not json", -32700, None),
        (b"\xff\xfe\x00", -32700, None),
        (b"[]", -32600, None),
        (b"42", -32600, None),
        (b'{"jsonrpc": "1.0", "id": 1, "method": "tools/list"}', -32600, None),
        (b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', -32600, None),
        # The id is readable, so the answer names it (JSON-RPC 2.0 leaves it null only when it is not).
        (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}', -32600, 1),
        (b'{"jsonrpc": "2.0", "id": 1}', -32600, None),
        # A method beside a result or an error is no request (issue 20 item 16: it was -32602).
        (json.dumps({**json.loads(modern_body("tools/call", {"name": "greet"})), "result": {}}).encode(), -32600, 7),
        (json.dumps({**json.loads(modern_body()), "error": {"code": -32603, "message": "m"}}).encode(), -32600, 7),
    ],
)
async def test_malformed_bodies_are_refused_with_400(env, data, code, answered_id):
    caller, tap, mark = env
    answer = await caller.raw(data, JSON_HEADERS)
    assert answer.status == 400
    assert answer.body.get("id") == answered_id and ("id" in answer.body) == (answered_id is not None)
    assert answer.body["error"]["code"] == code
    assert tap.since(mark) == []


async def test_a_malformed_body_is_told_where_it_failed(env):
    caller, tap, mark = env
    answer = await caller.raw(b'{"jsonrpc": "2.0",\n "id": 1\n "method": "tools/list"}', JSON_HEADERS)
    assert (answer.status, answer.body["error"]) == (
        400,
        {"code": -32700, "message": "Parse error: Expecting ',' delimiter at line 3, column 2"},
    )
    assert tap.since(mark) == []


async def test_body_over_the_limit_is_413(env):
    caller, tap, mark = env
    big = modern_body("tools/call", {"name": "greet", "arguments": {"name": "x" * 4096}})
    answer = await caller.raw(big, JSON_HEADERS)
    assert answer.status == 413
    assert answer.body["error"]["message"] == "Request body larger than 2048 bytes"
    assert tap.since(mark) == []


async def test_wrong_content_type_is_415(env):
    caller, tap, mark = env
    answer = await caller.raw(modern_body(), {**JSON_HEADERS, "Content-Type": "text/plain"})
    assert (answer.status, answer.body["error"]["code"]) == (415, -32600)
    assert tap.since(mark) == []


async def test_accept_without_json_is_406(env):
    caller, tap, mark = env
    answer = await caller.raw(modern_body(), {**JSON_HEADERS, "Accept": "text/event-stream"})
    assert answer.status == 406
    assert tap.since(mark) == []


@pytest.mark.parametrize(
    ("headers", "code", "status"),
    [
        ({"MCP-Protocol-Version": None}, -32020, 400),
        ({"MCP-Protocol-Version": "2025-11-25"}, -32020, 400),
        ({"Mcp-Method": "tools/list"}, -32020, 400),
        ({"Mcp-Name": "other"}, -32020, 400),
        ({"Mcp-Name": "=?base64?bm90LWdyZWV0?="}, -32020, 400),
    ],
)
async def test_header_mismatches_are_32020(env, headers, code, status):
    caller, tap, mark = env
    sent = {**JSON_HEADERS, "Mcp-Method": "tools/call", **{k: v for k, v in headers.items() if v is not None}}
    if headers.get("MCP-Protocol-Version", "") is None:
        del sent["MCP-Protocol-Version"]
    answer = await caller.raw(modern_body("tools/call", {"name": "greet", "arguments": {"name": "x"}}), sent)
    assert (answer.status, answer.body["error"]["code"]) == (status, code)
    assert tap.since(mark) == []


async def test_base64_encoded_mcp_name_is_decoded_before_comparing(env):
    caller, _, _ = env
    sent = {**JSON_HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "=?base64?Z3JlZXQ=?="}
    answer = await caller.raw(modern_body("tools/call", {"name": "greet", "arguments": {"name": "b64"}}), sent)
    assert answer.status == 200
    assert answer.body["result"]["content"] == [{"type": "text", "text": "Hello, b64!"}]


async def test_unsupported_version_is_32022_with_supported_and_requested(env):
    caller, tap, mark = env
    body = json.loads(modern_body())
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
    answer = await caller.raw(json.dumps(body), {**JSON_HEADERS, "MCP-Protocol-Version": "2099-01-01"})
    assert answer.status == 400
    assert answer.body["error"]["code"] == -32022
    assert answer.body["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}
    assert tap.since(mark) == []


async def test_modern_header_without_meta_is_32602(env):
    caller, tap, mark = env
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    answer = await caller.raw(body, JSON_HEADERS)
    assert (answer.status, answer.body["error"]["code"]) == (400, -32602)
    assert "io.modelcontextprotocol/protocolVersion" in answer.body["error"]["message"]
    assert tap.since(mark) == []


async def test_missing_client_capabilities_is_32602(env):
    caller, tap, mark = env
    body = json.loads(modern_body())
    del body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
    answer = await caller.raw(json.dumps(body), JSON_HEADERS)
    assert (answer.status, answer.body["error"]["code"]) == (400, -32602)
    assert tap.since(mark) == []


async def test_a_post_without_session_or_modern_envelope_gets_a_clear_error(env):
    caller, tap, mark = env
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    plain = await caller.raw(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}), headers)
    assert plain.status == 400
    assert plain.body["error"]["message"].startswith("Bad Request: Missing session ID (")
    assert tap.since(mark) == []


async def test_get_and_delete_are_405_and_unknown_sessions_404(env):
    caller, tap, mark = env
    for verb in ("GET", "DELETE"):
        answer = await caller.raw(b"", {}, method=verb)
        assert (answer.status, answer.headers["Allow"]) == (405, "POST")
    assert tap.since(mark) == []


async def test_unknown_forged_and_foreign_task_ids_are_32602(env):
    caller, tap, mark = env
    keyring = Keyring(TEST_KEY)
    genuine = keyring.seal_task_id(TaskRef("main", "s", "t"), "anonymous")
    flipped = genuine[:10] + ("A" if genuine[10] != "A" else "B") + genuine[11:]
    foreign = keyring.seal_task_id(TaskRef("main", "s", "t"), keyring.principal("Bearer someone-else"))
    other_key = Keyring(bytes(64)).seal_task_id(TaskRef("main", "s", "t"), "anonymous")
    for task_id in ("no-such-task", flipped, foreign, other_key, "", 42, None):
        for method in ("tasks/get", "tasks/update", "tasks/cancel"):
            answer = await caller.call(method, {"taskId": task_id})
            assert (answer.status, answer.error["code"]) == (400, -32602), (method, task_id)
    assert tap.since(mark) == []


async def test_unreachable_backend_is_502_naming_it(tmp_path):
    async with running_proxy(f"http://127.0.0.1:{free_port()}/mcp", tmp_path) as proxy, aiohttp.ClientSession() as http:
        answer = await Caller(http, proxy.url).call("tools/list")
    assert answer.status == 502
    assert answer.error["code"] == -32603
    assert answer.error["message"].startswith("Backend 'main' unavailable: ")


@pytest.mark.parametrize(
    ("content_type", "body"),
    [("text/html", b"<html>hello</html>"), ("application/json", b'{"hello": "world"}'), ("application/json", b"\x00garbage")],
)
async def test_backend_answering_garbage_is_502(tmp_path, content_type, body):
    async def garbage(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type=content_type)

    app = web.Application()
    app.router.add_route("*", "/mcp", garbage)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        async with running_proxy(f"http://{host}:{port}/mcp", tmp_path) as proxy, aiohttp.ClientSession() as http:
            caller = Caller(http, proxy.url)
            for method in ("tools/list", "server/discover"):
                answer = await caller.call(method)
                assert answer.status == 502, answer.body
                assert answer.error["code"] == -32603
                assert "'main'" in answer.error["message"]
            health = await http.get(proxy.base_url + "/healthz")
            assert health.status == 200
    finally:
        await runner.cleanup()


async def test_a_body_that_trickles_in_too_slowly_is_408(tapped, tmp_path):
    import asyncio as _asyncio

    async with running_proxy(tapped.url, tmp_path, body_timeout_ms=300) as proxy:
        host, port = proxy.base_url.removeprefix("http://").split(":")
        reader, writer = await _asyncio.open_connection(host, int(port))
        body = modern_body().encode()
        writer.write(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"MCP-Protocol-Version: 2026-07-28\r\nContent-Length: %d\r\n\r\n" % len(body) + body[:10]
        )
        await writer.drain()
        head = await _asyncio.wait_for(reader.readline(), 5)
        writer.close()
    assert head.startswith(b"HTTP/1.1 408")
