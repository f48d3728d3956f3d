"""Lone UTF-16 surrogates (`"\\ud800"`) are legal JSON escapes; Python's `json.loads` turns them into
`str` values that `str.encode("utf-8")` refuses. `translators/jsonrpc.py:137` (`dumps`, with
`ensure_ascii=False` then `.encode()`) is used both for the answer to the client
(`proxy/faces/modern.py:146/148`, outside the handler's try) and for every upstream message
(`proxy/upstream/session_wire.py:195`, `:143`), so any such string that is echoed or forwarded
turns into an HTTP 500 (a bare aiohttp "500 Internal Server Error" text page when it is in the
answer). docs/behaviour.md §6: bad input gets a JSON-RPC error, never a crash.

Acceptable answers (each exact): the normal answer with the string preserved (e.g. escaped on
the wire), or HTTP 400 with -32700/-32600 (the proxy refusing such text), without reaching
the backend.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from adv_support import MODERN_HEADERS, dumps, healthz_ok, modern_body, wait_for_input
from support import Caller, running_proxy

pytestmark = pytest.mark.peers

SURROGATE = "\ud800"
REFUSED = {(400, -32700), (400, -32600)}


@pytest.fixture
async def env(tapped, tmp_path):
    async with running_proxy(tapped.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        await Caller(http, proxy.url).call("tools/list")  # the upstream session exists before the mark
        yield http, proxy, tapped, len(tapped.methods)
        assert await healthz_ok(http, proxy.base_url)


async def post(http: aiohttp.ClientSession, url: str, data: bytes, headers=MODERN_HEADERS):
    async with http.post(url, data=data, headers=headers) as response:
        text = await response.read()
        content_type = response.headers.get("Content-Type", "")
    assert content_type.startswith("application/json"), (response.status, content_type, text[:200])
    return response.status, json.loads(text)


@pytest.mark.parametrize(
    ("method", "params", "normal"),
    [
        ("tasks/result", {"taskId": "x"}, (404, -32601)),  # refused by the proxy itself
        ("tasks/get", {"taskId": "not-a-sealed-id"}, (400, -32602)),  # refused by the proxy itself
        ("tools/list", {}, (200, None)),  # forwarded
    ],
)
async def test_a_lone_surrogate_request_id_gets_a_json_rpc_answer(env, method, params, normal):
    http, proxy, tap, mark = env
    status, body = await post(http, proxy.url, dumps(modern_body(method, params, id=SURROGATE)))
    code = body.get("error", {}).get("code")
    if (status, code) in REFUSED:
        assert tap.since(mark) == []
        return
    assert (status, code) == normal, body
    assert body["id"] == SURROGATE


async def test_a_lone_surrogate_in_the_method_gets_a_json_rpc_answer(env):
    http, proxy, tap, mark = env
    status, body = await post(http, proxy.url, dumps(modern_body("tasks/" + SURROGATE, {})))
    assert (status, body["error"]["code"]) in REFUSED | {(404, -32601)}
    assert tap.since(mark) == []


async def test_a_lone_surrogate_in_tool_arguments_is_not_a_500(env):
    """Forwarded today as far as `session_wire` (the upstream `dumps` raises, the generic handler
    answers 500). Escaping it instead makes mcp 1.30 drop the response stream (the proxy then
    answers 502, which §6 allows); refusing it at parse time (400) keeps it off the backend."""
    http, proxy, _, _ = env
    body = modern_body("tools/call", {"name": "greet", "arguments": {"name": "\ud83d"}})
    status, answer = await post(http, proxy.url, dumps(body))
    assert status != 500, answer
    assert answer["id"] == 7
    if "error" in answer:
        assert (status, answer["error"]["code"]) in REFUSED | {(400, -32602), (502, -32603)}


async def test_a_surrogate_header_byte_matching_the_meta_version_is_32022_not_500(env):
    """`MCP-Protocol-Version: \\xff` is decoded by aiohttp to "\\udcff"; a `_meta` version of
    "\\udcff" then matches it and reaches `unsupported_version` (translators/errors.py:62), whose
    message and `data.requested` carry the surrogate into the answer."""
    _, proxy, tap, mark = env
    host, port = proxy.base_url.rsplit("/", 1)[1].split(":")
    body = modern_body()
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "\udcff"
    data = dumps(body)
    request = (
        b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
        b"MCP-Protocol-Version: \xff\r\nConnection: close\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data
    )
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(request)
    await writer.drain()
    async with asyncio.timeout(5):
        raw = await reader.read()
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"application/json" in head, raw[:300]
    assert (status, json.loads(payload)["error"]["code"]) in {(400, -32022), (400, -32020)} | REFUSED
    assert tap.since(mark) == []


async def test_a_lone_surrogate_in_a_tasks_update_answer_is_not_a_500_and_loses_nothing(env):
    """`tasks/update` pops the captured request (proxy/capture.py:99) before `respond` fails to
    encode the answer, so today the client gets a 500 and the question is gone for good."""
    http, proxy, _, _ = env
    client = Caller(http, proxy.url)
    created = (await client.call("tools/call", {"name": "confirm_delete", "arguments": {"filename": "s.txt"}})).result
    await wait_for_input(client, created["taskId"])
    answer = await client.call(
        "tasks/update",
        {
            "taskId": created["taskId"],
            "inputResponses": {"input-1": {"action": "accept", "content": {"confirm": True, "note": SURROGATE}}},
        },
    )
    assert answer.status in (200, 400), answer.body
    if answer.status == 400:
        assert answer.error["code"] in (-32700, -32600, -32602)
        again = (await client.call("tasks/get", {"taskId": created["taskId"]})).result
        assert (again["status"], list(again["inputRequests"])) == ("input_required", ["input-1"])
    else:
        assert answer.result == {"resultType": "complete"}
    await client.call("tasks/cancel", {"taskId": created["taskId"]})
