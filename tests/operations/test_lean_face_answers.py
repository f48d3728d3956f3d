"""The lean face answers as aiohttp does (proxy/lean_face.py, docs/decisions.md §175), measured with
real sockets against a proxy relaying to the benchmark's modern upstream (in process).

The same request is sent twice: once with `Content-Length` in one write (what the lean face takes,
`whole_post`) and once with a chunked body (what it leaves to aiohttp's request loop). Status line, every
header field in its order and the body must be the same, `Date` aside: for a relayed JSON answer,
for a refusal the proxy answers itself, and for a relayed SSE stream.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from support import MODERN, meta, proxy_port, read_by_aiohttp, running_proxy
from yarl import URL

from proxy.bench.targets import start_fast_upstream, start_proxy
from proxy.lean_face import MAX_BODY, LeanTarget, whole_post

ENDPOINT = LeanTarget("/mcp", None, None)

Head = tuple[str, list[tuple[str, str]]]


def _request(method: str, params: dict[str, Any], *, chunked: bool, extra: str = "", request_id: str = "fixed-id-1") -> bytes:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": {**meta(), **params.get("_meta", {})}}}
    ).encode()
    fields = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"MCP-Protocol-Version: {MODERN}\r\nMcp-Method: {method}\r\nX-Request-Id: {request_id}\r\n{extra}"
    )
    if params.get("name"):
        fields += f"Mcp-Name: {params['name']}\r\n"
    if chunked:
        return f"{fields}Transfer-Encoding: chunked\r\n\r\n".encode() + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    return f"{fields}Content-Length: {len(body)}\r\n\r\n".encode() + body


async def _answer(reader: asyncio.StreamReader) -> tuple[Head, bytes]:
    """One HTTP answer: its status line, its header fields in order, and its body (chunks joined)."""
    async with asyncio.timeout(10):
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")[:-2]
        fields = [(name, value.strip()) for name, _, value in (line.partition(":") for line in lines[1:])]
        named = {name.lower(): value for name, value in fields}
        if "content-length" in named:
            return (lines[0], fields), await reader.readexactly(int(named["content-length"]))
        assert named["transfer-encoding"] == "chunked", fields
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
            body += await reader.readexactly(size)
            assert await reader.readexactly(2) == b"\r\n"
        assert await reader.readexactly(2) == b"\r\n"
        return (lines[0], fields), body


def _dateless(head: Head) -> Head:
    status, fields = head
    return status, [(name, value) for name, value in fields if name != "Date"]


async def _exchange(port: int, request: bytes) -> tuple[Head, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await _answer(reader)
    finally:
        writer.close()


async def _both_ways(port: int, method: str, params: dict[str, Any], extra: str = "") -> tuple[Head, bytes]:
    lean = _request(method, params, chunked=False, extra=extra)
    assert whole_post(read_by_aiohttp(lean), {"/mcp": ENDPOINT}) is not None  # the lean face takes this one
    head, body = await _exchange(port, lean)
    aiohttp_head, aiohttp_body = await _exchange(port, _request(method, params, chunked=True, extra=extra))
    assert (_dateless(head), body) == (_dateless(aiohttp_head), aiohttp_body)
    return head, body


async def test_a_relayed_answer_a_refusal_and_a_stream_are_the_same_on_both_paths(fast_modern_upstream_url, tmp_path):
    async with running_proxy(fast_modern_upstream_url, tmp_path) as proxy:
        port = proxy_port(proxy)
        (status, fields), body = await _both_ways(port, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
        assert status == "HTTP/1.1 200 OK"
        assert [name for name, _ in fields] == ["Content-Type", "Content-Length", "Date", "Server", "X-Request-Id"]
        assert dict(fields)["X-Request-Id"] == "fixed-id-1"
        assert json.loads(body)["result"]["content"] == [{"type": "text", "text": "hi"}]

        (status, fields), body = await _both_ways(
            port, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}, extra="Mcp-Method: tools/list\r\n"
        )
        assert status == "HTTP/1.1 400 Bad Request"
        assert json.loads(body)["error"]["message"] == "Mcp-Method header sent more than once with different values"

        (status, fields), body = await _both_ways(
            port, "tools/call", {"name": "progress", "arguments": {}, "_meta": {"progressToken": "p1"}}
        )
        assert (status, dict(fields)["Content-Type"]) == ("HTTP/1.1 200 OK", "text/event-stream")
        events = [json.loads(line[6:]) for line in body.decode().split("\n") if line.startswith("data: ")]
        assert [event.get("method") for event in events] == ["notifications/progress"] * 100 + [None]
        assert events[-1] == {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {"content": [{"type": "text", "text": "progress done"}], "isError": False, "resultType": "complete"},
        }


async def test_requests_written_back_to_back_are_answered_in_order_and_close_is_kept(fast_modern_upstream_url, tmp_path):
    async with running_proxy(fast_modern_upstream_url, tmp_path) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port(proxy))
        try:
            texts = [f"call {n}" for n in range(5)]
            for text in texts:  # each as its own write, not waiting for the answer before
                writer.write(
                    _request(
                        "tools/call",
                        {"name": "echo", "arguments": {"text": text}},
                        chunked=False,
                        request_id=text.replace(" ", "-"),
                    )
                )
            answered = [await _answer(reader) for _ in texts]
            assert [
                (dict(head[1])["X-Request-Id"], json.loads(body)["result"]["content"][0]["text"]) for head, body in answered
            ] == [(text.replace(" ", "-"), text) for text in texts]
            writer.write(
                _request(
                    "tools/call", {"name": "echo", "arguments": {"text": "last"}}, chunked=False, extra="Connection: close\r\n"
                )
            )
            (status, fields), body = await _answer(reader)
            assert (status, dict(fields)["Connection"], json.loads(body)["result"]["content"][0]["text"]) == (
                "HTTP/1.1 200 OK",
                "close",
                "last",
            )
            async with asyncio.timeout(10):
                assert await reader.read() == b""  # closed by the proxy
        finally:
            writer.close()


async def test_bodies_either_side_of_the_lean_faces_bound_are_answered(fast_modern_upstream_url, tmp_path):
    """A body of `MAX_BODY` bytes may be served lean, one byte more goes to aiohttp: both answered,
    on one connection, in one write each (a body of 140,000 bytes read whole once went unanswered)."""
    async with running_proxy(fast_modern_upstream_url, tmp_path) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port(proxy))
        try:
            for size in (MAX_BODY, MAX_BODY + 1, 140_000):
                request = _request("tools/call", {"name": "echo", "arguments": {"text": "x"}}, chunked=False)
                head, _, body = request.partition(b"\r\n\r\n")
                padded = body[:-1] + b', "pad": "' + b"p" * (size - len(body) - 11) + b'"}'
                assert len(padded) == size
                writer.write(
                    head.replace(f"Content-Length: {len(body)}".encode(), f"Content-Length: {size}".encode())
                    + b"\r\n\r\n"
                    + padded
                )
                (status, _fields), answer = await _answer(reader)
                assert (size, status, json.loads(answer)["result"]["content"]) == (
                    size,
                    "HTTP/1.1 200 OK",
                    [{"type": "text", "text": "x"}],
                )
        finally:
            writer.close()


async def _forty_then_three_pipelined(port: int) -> list[str]:
    """On one connection: 40 lean requests one after another, then three in one write; the texts echoed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        texts = []
        for n in range(40):
            writer.write(_request("tools/call", {"name": "echo", "arguments": {"text": f"seq {n}"}}, chunked=False))
            texts.append(json.loads((await _answer(reader))[1])["result"]["content"][0]["text"])
        writer.write(b"".join(_request("tools/call", {"name": "echo", "arguments": {"text": t}}, chunked=False) for t in "ABC"))
        for _ in "ABC":
            texts.append(json.loads((await _answer(reader))[1])["result"]["content"][0]["text"])
        return texts
    finally:
        writer.close()


EXPECTED_TEXTS = [f"seq {n}" for n in range(40)] + ["A", "B", "C"]


async def test_a_connection_serves_any_number_of_lean_requests_and_then_pipelined_ones(fast_modern_upstream_url, tmp_path):
    """The parser counts the messages it handed out until they are consumed (aiohttp stops parsing
    at 32 outstanding); the lean face consumes each at once. Forgetting to say so left the second
    of two pipelined requests unanswered after 31 lean ones (found by review of decision 182)."""
    async with running_proxy(fast_modern_upstream_url, tmp_path) as proxy:
        assert await _forty_then_three_pipelined(proxy_port(proxy)) == EXPECTED_TEXTS


async def test_the_same_on_aiohttps_pure_python_parser(tmp_path):
    """Where aiohttp's C extensions are not installed (`AIOHTTP_NO_EXTENSIONS=1` here), its Python
    parser refuses to parse at 32 outstanding messages: without the lean face consuming each, the
    33rd request on a connection got no answer but the header deadline's 408."""
    upstream = start_fast_upstream("modern")
    try:
        proxy = start_proxy(upstream.url, tmp_path, env={"AIOHTTP_NO_EXTENSIONS": "1"})
        try:
            texts = await _forty_then_three_pipelined(URL(proxy.url).port)
            output = proxy.process.output_tail()
        finally:
            proxy.stop()
    finally:
        upstream.stop()
    assert texts == EXPECTED_TEXTS
    assert "Traceback" not in output
