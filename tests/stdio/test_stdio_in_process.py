"""A stdio backend's POSTs answered in the proxy's own event loop (docs/decisions.md §116): the
connector's `post` gives a `BridgeResponse` (no socket crossed), JSON or a stream of SSE events
framed as the socket carried them, with the bridge's rules: 413 over `max_line_bytes`, the read
bound of `upstream_timeout_ms`, a request given up is cancelled in the process, a closed
connector refuses. The backend is the benchmark's fast upstream on stdio (`proxy.bench.upstream`)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from proxy.config import Upstream
from proxy.sse import SseParser
from proxy.upstream.stdio import StdioEndpoint
from proxy.upstream.stdio.bridge import BridgeResponse
from proxy.upstream.stdio.tasks import GRACE_S
from translators.errors import NOT_OF_SESSION, McpError
from translators.protocol import H_SESSION_ID

COMMAND = [sys.executable, "-m", "proxy.bench.upstream", "--wire", "stdio", "--poll-interval-ms", "100"]
ACCEPT = {"Accept": "application/json, text/event-stream"}


def _body(request_id: int, method: str, params: dict[str, object]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


async def _endpoint(request_timeout_ms: int = 300_000, **config: object) -> AsyncIterator[tuple[StdioEndpoint, str]]:
    upstream = Upstream(name="fast", command=COMMAND, process_scope="shared", **config)
    async with aiohttp.ClientSession() as http:
        endpoint = StdioEndpoint(upstream, http, request_timeout_ms=request_timeout_ms)
        try:
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            response = await endpoint.post(_body(1, "initialize", init), ACCEPT)
            assert isinstance(response, BridgeResponse)
            async with response:
                assert response.status == 200
                session_id = response.headers[H_SESSION_ID]
                assert json.loads(await response.read())["result"]["serverInfo"]["name"]
            yield endpoint, session_id
        finally:
            await endpoint.close()


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[StdioEndpoint, str]]:
    async for pair in _endpoint():
        yield pair


async def test_a_json_answer_and_a_streamed_one_read_like_the_sockets(endpoint: tuple[StdioEndpoint, str]) -> None:
    stdio, session_id = endpoint
    headers = {**ACCEPT, H_SESSION_ID: session_id}
    async with await stdio.post(_body(7, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}), headers) as response:
        assert (response.status, response.headers["Content-Type"]) == (200, "application/json")
        body = await response.read()
        assert response.content_length == len(body)
        assert json.loads(body) == {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {"content": [{"type": "text", "text": "hi"}], "isError": False},
        }
    params = {"name": "progress", "arguments": {"count": 3}, "_meta": {"progressToken": "p"}}
    async with await stdio.post(_body(8, "tools/call", params), headers) as response:
        assert (response.status, response.headers["Content-Type"], response.content_length) == (200, "text/event-stream", None)
        events = [json.loads(e.data) for chunk in [c async for c in response.content.iter_any()] for e in SseParser().feed(chunk)]
    assert [e.get("params", {}).get("progress") for e in events[:-1]] == [1, 2, 3]
    assert {e["params"]["progressToken"] for e in events[:-1]} == {"p"}  # the client's own token back
    assert events[-1]["id"] == 8 and "result" in events[-1]


async def test_a_body_over_max_line_bytes_is_refused_with_413() -> None:
    async for stdio, session_id in _endpoint(max_line_bytes=1024):
        text = "x" * 2000
        body = _body(2, "tools/call", {"name": "echo", "arguments": {"text": text}})
        async with await stdio.post(body, {**ACCEPT, H_SESSION_ID: session_id}) as response:
            assert response.status == 413
            assert await response.read() == f"Maximum request body size 1024 exceeded, actual body size {len(body)}".encode()


async def _blocking_result(stdio: StdioEndpoint, session_id: str) -> bytes:
    """The body of a `tasks/result` that blocks: the task of `sleep` stays working for 30 s."""
    headers = {**ACCEPT, H_SESSION_ID: session_id}
    params = {"name": "sleep", "arguments": {"seconds": 30}, "task": {"ttl": 60_000}}
    async with await stdio.post(_body(3, "tools/call", params), headers) as response:
        task_id = json.loads(await response.read())["result"]["task"]["taskId"]
    return _body(4, "tasks/result", {"taskId": task_id})


async def test_a_silent_answer_ends_at_the_read_bound_and_is_given_up_in_the_process() -> None:
    async for stdio, session_id in _endpoint(request_timeout_ms=300):
        body = await _blocking_result(stdio, session_id)
        [session] = stdio.pool.sessions.values()
        with pytest.raises(aiohttp.SocketTimeoutError):
            await stdio.post(body, {**ACCEPT, H_SESSION_ID: session_id})
        assert session.inflight == {}


async def test_a_caller_that_goes_away_cancels_its_request_in_the_process(endpoint: tuple[StdioEndpoint, str]) -> None:
    stdio, session_id = endpoint
    body = await _blocking_result(stdio, session_id)
    [session] = stdio.pool.sessions.values()
    waiting = asyncio.ensure_future(stdio.post(body, {**ACCEPT, H_SESSION_ID: session_id}))
    async with asyncio.timeout(10):  # a deadline: a regression fails here instead of hanging
        while not session.inflight:
            await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert session.inflight == {}


async def test_a_closed_connector_refuses_a_post(endpoint: tuple[StdioEndpoint, str]) -> None:
    stdio, session_id = endpoint
    await stdio.close()
    with pytest.raises(McpError) as refused:
        await stdio.post(_body(5, "ping", {}), {**ACCEPT, H_SESSION_ID: session_id})
    assert (refused.value.http_status, refused.value.message) == (
        502,
        "Backend 'fast' unavailable: cannot reach it (its connector is closed)",
    )


SHAPES = [sys.executable, str(Path(__file__).parent.parent / "peers" / "shape_stdio_server.py")]


def _compact(message: object, *, ascii_only: bool) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=ascii_only).encode()


@pytest.mark.parametrize("form", ["prefix", "suffix", "nested", "spaced"])
async def test_the_process_and_the_client_get_each_others_bytes_with_only_the_id_changed(form: str) -> None:
    """A compact request reaches the process as the client's bytes with the process's id, and
    a response the process wrote compactly (its id first or last, the only `"id"`) reaches the
    client as the process's bytes with the client's id (`multiplex.line_with_id`); any other shape
    is decoded and encoded again (compact, UTF-8) to the same message. The bytes tell which:
    an escaped `\\u00e9` passed on stays escaped, one encoded again is written as UTF-8."""
    upstream = Upstream(name="shapes", command=SHAPES, process_scope="shared")
    compact = b'{"jsonrpc":"2.0","id":"c-9","method":"tools/call","params":{"name":"shape","arguments":{"form":"%s","note":"caf\\u00e9"}}}'
    spaced = (
        b'{"jsonrpc": "2.0",\n "id": "c-10", "method": "tools/call", "params": {"name": "shape", "arguments": {"form": "%s"}}}'
    )
    async with aiohttp.ClientSession() as http:
        stdio = StdioEndpoint(upstream, http)
        try:
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            async with await stdio.post(_body(1, "initialize", init), ACCEPT) as response:
                session_id = response.headers[H_SESSION_ID]
            headers = {**ACCEPT, H_SESSION_ID: session_id}
            answers = []
            for body in (compact % form.encode(), spaced % form.encode()):
                async with await stdio.post(body, headers) as response:
                    answers.append(await response.read())
        finally:
            await stdio.close()
    decoded = [json.loads(answer) for answer in answers]
    assert [d["id"] for d in decoded] == ["c-9", "c-10"]
    received = [d["result"]["content"][0]["text"] for d in decoded]  # the lines the process read
    process_ids = [json.loads(line)["id"] for line in received]
    assert received[0].encode() == (compact % form.encode()).replace(b'"id":"c-9"', b'"id":%d' % process_ids[0])
    assert received[1].encode() == _compact({**json.loads(spaced % form.encode()), "id": process_ids[1]}, ascii_only=False)
    passed_on = form in ("prefix", "suffix")
    for answer, message in zip(answers, decoded, strict=True):
        assert message["result"]["note"] == "é"
        assert answer == _compact(message, ascii_only=passed_on)


async def test_a_json_answer_is_handed_over_decoded_and_a_stream_is_not(endpoint: tuple[StdioEndpoint, str]) -> None:
    """`BridgeResponse.json_message`: what the proxy's own session wire takes instead of the body
    (docs/decisions.md §130); the same message the body holds, and None for an SSE stream."""
    stdio, session_id = endpoint
    headers = {**ACCEPT, H_SESSION_ID: session_id}
    async with await stdio.post(_body(5, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}), headers) as response:
        decoded = response.json_message
        assert (
            decoded
            == json.loads(await response.read())
            == {
                "jsonrpc": "2.0",
                "id": 5,
                "result": {"content": [{"type": "text", "text": "hi"}], "isError": False},
            }
        )
    params = {"name": "progress", "arguments": {"count": 1}, "_meta": {"progressToken": "p"}}
    async with await stdio.post(_body(6, "tools/call", params), headers) as response:
        assert (response.json_message, response.content_length) == (None, None)
        assert [c async for c in response.content.iter_any()][-1].startswith(b"event: message\ndata: ")


async def test_a_request_with_a_second_id_spelt_with_escapes_reaches_the_process_with_the_process_id_only() -> None:
    """`{"id":99,...,"\\u0069d":99}` holds its id twice, the second spelt with escapes: passed on
    with only the first replaced, the process would read 99 (another session's request, were that
    its process id) and this request's answer would go astray (here: never come). It is encoded
    again instead, with the process's id only."""
    upstream = Upstream(name="shapes", command=SHAPES, process_scope="shared")
    body = (
        b'{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"shape","arguments":{"form":"prefix"}},"\\u0069d":99}'
    )
    async with aiohttp.ClientSession() as http:
        stdio = StdioEndpoint(upstream, http, request_timeout_ms=5_000)
        try:
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
            async with await stdio.post(_body(1, "initialize", init), ACCEPT) as response:
                session_id = response.headers[H_SESSION_ID]
            async with await stdio.post(body, {**ACCEPT, H_SESSION_ID: session_id}) as response:
                answer = json.loads(await response.read())
        finally:
            await stdio.close()
    assert answer["id"] == 99  # the client's id, as a decoder reads its body
    received = json.loads(answer["result"]["content"][0]["text"])
    assert received == {**json.loads(body), "id": received["id"]} and isinstance(received["id"], int) and received["id"] != 99
    assert answer["result"]["content"][0]["text"] == json.dumps(received, separators=(",", ":"))


async def test_a_task_is_forgotten_by_the_mux_once_its_ttl_and_grace_have_passed(endpoint: tuple[StdioEndpoint, str]) -> None:
    """A pooled session lives as long as the proxy: the mux's memory of which session created a
    task ends `GRACE_S` after the task's ttl (docs/decisions.md §134); the task's requests are then
    "Unknown task", as the server itself may answer by then. Time is moved by giving the mux's
    sans-clock bookkeeping a later `now`."""
    stdio, session_id = endpoint
    headers = {**ACCEPT, H_SESSION_ID: session_id}
    params = {"name": "nowork", "arguments": {}, "task": {"ttl": 1_000}}
    async with await stdio.post(_body(3, "tools/call", params), headers) as response:
        task_id = json.loads(await response.read())["result"]["task"]["taskId"]
    async with await stdio.post(_body(4, "tasks/get", {"taskId": task_id}), headers) as response:
        assert json.loads(await response.read())["result"]["taskId"] == task_id
    [slot] = stdio.pool.slots.values()
    assert slot.busy is True  # a task the process may still know
    assert slot._task_owner.forget_due(time.monotonic() + 1.0 + GRACE_S) == 1
    assert slot.busy is False
    async with await stdio.post(_body(5, "tasks/get", {"taskId": task_id}), headers) as response:
        assert json.loads(await response.read())["error"] == {"code": -32602, "message": f"Unknown task: {NOT_OF_SESSION}"}
