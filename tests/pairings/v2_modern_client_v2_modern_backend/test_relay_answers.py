"""What a relay to a v2-modern backend (the reference v2 server, FastMCP 4) gives the client when
the backend's answer is not the usual 200 JSON: a draft-era `-32003` (docs/decisions.md §37), an
SSE answer or a refusal for a client that accepts only JSON, an HTTP error without a JSON-RPC body
(docs/decisions.md §36). Where FastMCP 4 cannot be made to answer so, a loopback `ShapingTap`
(`tests/tap.py`) between proxy and backend changes its answer on the wire.
"""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest
from support import Caller, running_proxy
from tap import ShapingTap

from proxy.sse import SseParser

pytestmark = pytest.mark.peers

JSON_ONLY = {"Accept": "application/json"}
"""The README's curl: a client that accepts JSON only."""
REQUIRED_MESSAGE = (
    "Tool 'failing_job' requires the tasks extension (io.modelcontextprotocol/tasks); "
    "the client did not declare it for this request."
)
REQUIRED_DATA = {"requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
GREETING = [{"type": "text", "text": "Hello, Ada!"}]


@pytest.fixture
async def tap(reference_v2_server):
    shaping = await ShapingTap.start(reference_v2_server.url)
    yield shaping
    await shaping.stop()


async def _sse_messages(http: aiohttp.ClientSession, caller: Caller, method: str, params: dict) -> tuple[int, str, list[dict]]:
    body = caller.body(method, params, declare=False)
    headers = {**caller.headers(method), "Content-Type": "application/json"}
    parser = SseParser()
    messages: list[dict] = []
    async with http.post(caller.url, data=json.dumps(body), headers=headers) as response:
        async for chunk in response.content.iter_any():
            messages.extend(json.loads(event.data) for event in parser.feed(chunk))
        return response.status, response.headers.get("Content-Type", ""), messages


# -- -32003 from a draft-era v2 backend -----------------------------------------------------------


async def test_a_relayed_json_error_with_32003_reaches_the_client_as_32021(tap, tmp_path):
    tap.legacy_codes = True
    async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        answer = await Caller(http, proxy.url).call("tools/call", {"name": "failing_job", "arguments": {}}, declare=False)
    assert (answer.status, answer.error) == (400, {"code": -32021, "message": REQUIRED_MESSAGE, "data": REQUIRED_DATA})


async def test_a_relayed_sse_error_with_32003_split_across_chunks_reaches_the_client_as_32021(tap, tmp_path):
    tap.legacy_codes = tap.as_sse = True
    async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        status, content_type, messages = await _sse_messages(http, caller, "tools/call", {"name": "failing_job", "arguments": {}})
    assert (status, content_type) == (200, "text/event-stream")
    assert messages == [
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32021, "message": REQUIRED_MESSAGE, "data": REQUIRED_DATA}}
    ]


async def test_a_relayed_sse_answer_without_the_code_is_passed_on_as_it_came(tap, tmp_path):
    tap.as_sse = True
    async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        status, _, messages = await _sse_messages(http, caller, "tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
    assert status == 200
    [message] = messages
    assert (message["id"], message["result"]["content"]) == (1, GREETING)


# -- clients that accept only JSON; HTTP errors without a JSON-RPC body -----------------------------


async def test_a_json_only_client_is_served_by_a_relayed_fastmcp4(reference_v2_server, tmp_path):
    async with running_proxy(reference_v2_server.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        answer = await Caller(http, proxy.url).call(
            "tools/call", {"name": "greet", "arguments": {"name": "Ada"}}, headers=JSON_ONLY
        )
    assert (answer.status, answer.headers["Content-Type"]) == (200, "application/json")
    assert answer.result["content"] == GREETING


async def test_a_json_only_client_gets_an_sse_answer_as_its_final_json_message(tap, tmp_path):
    tap.as_sse = True
    async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        greeted = await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}}, headers=JSON_ONLY)
        refused = await caller.call("tools/call", {"name": "failing_job", "arguments": {}}, declare=False, headers=JSON_ONLY)
    assert (greeted.status, greeted.headers["Content-Type"], greeted.body["id"]) == (200, "application/json", 1)
    assert greeted.result["content"] == GREETING
    assert (refused.status, refused.body["id"], refused.error) == (
        400,
        2,
        {"code": -32021, "message": REQUIRED_MESSAGE, "data": REQUIRED_DATA},
    )


async def test_a_backends_http_error_without_a_body_becomes_a_json_rpc_error_and_one_log_line(tap, tmp_path, caplog):
    async with running_proxy(tap.url, tmp_path) as proxy, aiohttp.ClientSession() as http:
        tap.bad_gateway = True
        with caplog.at_level(logging.WARNING, logger="proxy.pairings.relay"):
            answer = await Caller(http, proxy.url).call("tools/list")
    assert (answer.status, answer.headers["Content-Type"]) == (502, "application/json")
    assert answer.body == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32603, "message": "Backend 'main' unavailable: answered HTTP 502 without a JSON-RPC body"},
    }
    lines = [r.getMessage() for r in caplog.records if r.name == "proxy.pairings.relay"]
    assert lines == ["backend main answered HTTP 502 without a JSON-RPC body to tools/list"]


async def test_a_mixed_fleet_serves_ten_json_only_calls(reference_v1_server, reference_v2_server, tmp_path):
    upstream = [{"name": "old", "url": reference_v1_server.url}, {"name": "upgraded", "url": reference_v2_server.url}]
    async with running_proxy("", tmp_path, upstream=upstream) as proxy, aiohttp.ClientSession() as http:
        caller = Caller(http, proxy.url)
        answers = [
            await caller.call("tools/call", {"name": "greet", "arguments": {"name": "Ada"}}, headers=JSON_ONLY) for _ in range(10)
        ]
    assert [(a.status, a.result["content"]) for a in answers] == [(200, GREETING)] * 10
