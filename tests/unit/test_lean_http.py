"""The relay's own HTTP/1.1 client (`proxy/upstream/http1.py`, `proxy/upstream/lean.py`,
docs/decisions.md §115): the response parser for every split of the bytes, and the pool against
real servers on loopback (aiohttp's, and raw sockets for what aiohttp's server never sends:
chunked bodies cut anywhere, interim answers, a connection closed before or during an answer)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from proxy.upstream import lean
from proxy.upstream.http1 import ProtocolError, ResponseParser, request_head
from proxy.upstream.lean import LeanPool

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nTrailer: x\r\n\r\n"
)
LENGTH = b'HTTP/1.1 200 OK\r\nContent-Length: 13\r\nMcp-Session-Id: s1\r\nX-Two: a\r\nX-Two: b\r\n\r\n{"result":{}}'


def _parse(raw: bytes, step: int) -> tuple[ResponseParser, bytes]:
    parser = ResponseParser()
    body = b""
    for at in range(0, len(raw), step):
        body += b"".join(parser.feed(raw[at : at + step]))
    return parser, body


@pytest.mark.parametrize("step", [1, 2, 3, 7, 64, 10_000])
def test_a_chunked_body_is_whole_for_every_split(step: int) -> None:
    parser, body = _parse(CHUNKED, step)
    assert parser.done
    assert body == b"hello, world"
    assert parser.head is not None and parser.head.chunked and parser.head.keep_alive
    assert parser.extra == b""


@pytest.mark.parametrize("step", [1, 5, 10_000])
def test_a_body_of_known_length_keeps_every_header_in_order(step: int) -> None:
    parser, body = _parse(LENGTH, step)
    assert parser.done and body == b'{"result":{}}'
    assert parser.head is not None
    assert (parser.head.status, parser.head.content_length, parser.head.headers["mcp-session-id"]) == (200, 13, "s1")
    assert parser.head.headers.getall("X-Two") == ["a", "b"]


EVENTS = [b'data: {"n":%d}\n\n' % n for n in range(100)]
STREAM = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in EVENTS)
    + b"0\r\n\r\n"
)


def test_whole_chunks_in_one_read_come_out_one_piece_each_and_split_ones_whole() -> None:
    parser = ResponseParser()
    assert parser.feed(STREAM) == EVENTS
    assert parser.done and parser.extra == b""
    for step in (1, 5, 33, 1000):
        parser, body = _parse(STREAM, step)
        assert (parser.done, body) == (True, b"".join(EVENTS))


@pytest.mark.parametrize("size", [b"-5", b"zz", b"5 5"])
def test_a_bad_chunk_size_before_a_whole_chunk_is_still_refused(size: bytes) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size + b"\r\nhello\r\n0\r\n\r\n"
    with pytest.raises(ProtocolError, match="chunk size"):
        ResponseParser().feed(raw)


def test_interim_answers_are_skipped_and_bytes_after_the_message_are_kept() -> None:
    parser = ResponseParser()
    body = parser.feed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\nHTTP/1.1")
    assert (body, parser.done, parser.extra) == ([], True, b"HTTP/1.1")
    assert parser.head is not None and parser.head.status == 202


def test_equal_content_lengths_are_one_and_a_head_without_connection_follows_its_version() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2, 2\r\n\r\nab") == [b"ab"]
    assert parser.done and parser.head is not None
    assert (parser.head.content_length, parser.head.keep_alive) == (2, True)
    parser = ResponseParser()
    parser.feed(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert parser.head is not None and (parser.head.content_length, parser.head.keep_alive) == (0, False)
    parser = ResponseParser()
    parser.feed(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n")
    assert parser.head is not None and parser.head.keep_alive


def test_a_body_without_framing_ends_with_the_connection() -> None:
    parser = ResponseParser()
    assert parser.feed(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nab") == [b"ab"]
    assert parser.feed(b"cd") == [b"cd"]
    assert not parser.done
    parser.eof()
    assert parser.done and parser.head is not None and not parser.head.keep_alive


@pytest.mark.parametrize(
    "raw",
    [
        b"HTTP/2 200\r\n\r\n",
        b"HTTP/1.1 20 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbroken line\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: ²\r\n\r\n".encode(),  # digits to str.isdigit, not to int
        "HTTP/1.1 ²²² OK\r\n\r\n".encode(),
        b"HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
    ],
)
def test_what_is_not_http_1_1_is_refused(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        ResponseParser().feed(raw)


def test_a_response_cut_short_is_refused_at_the_end_of_the_connection() -> None:
    parser = ResponseParser()
    parser.feed(LENGTH[:-3])
    with pytest.raises(ProtocolError, match="ended before the response did"):
        parser.eof()


def test_the_request_head_refuses_a_smuggled_header_and_replaces_framing() -> None:
    head = request_head("POST", "/mcp", "127.0.0.1:9", {"Accept": "a", "Content-Length": "99", "Mcp-Name": "n\udcff"}, 2)
    assert head == b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:9\r\nAccept: a\r\nMcp-Name: n\xff\r\nContent-Length: 2\r\n\r\n"
    with pytest.raises(ValueError, match="cannot be sent"):
        request_head("POST", "/", "h", {"X": "a\r\nInjected: 1"}, 0)


# -- the pool against real servers -------------------------------------------------------------------


async def _aiohttp_server(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/mcp", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/mcp"


async def test_one_connection_carries_many_requests_and_an_sse_answer_streams() -> None:
    peers: list[object] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        body = await request.read()
        if request.headers.get("Accept") == "text/event-stream":
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for n in range(3):
                await response.write(b"data: %d\n\n" % n)
                await asyncio.sleep(0)
            await response.write_eof()
            return response
        return web.Response(body=body[::-1], headers={"Mcp-Session-Id": "abc"}, content_type="application/json")

    runner, url = await _aiohttp_server(handler)
    pool = LeanPool(read_timeout_s=5)
    try:
        for n in range(5):
            async with await pool.request(url, b"%d23" % n, {"Accept": "application/json"}) as response:
                assert (response.status, response.headers["Mcp-Session-Id"], response.content_length) == (200, "abc", 3)
                assert await response.read() == b"32%d" % n
        async with await pool.request(url, b"{}", {"Accept": "text/event-stream"}) as response:
            chunks = [chunk async for chunk in response.content.iter_any()]
        assert b"".join(chunks) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
        assert len(set(peers)) == 1 and len(peers) == 6  # every request on the one kept-alive connection
    finally:
        await pool.close()
        await runner.cleanup()


async def test_a_compressed_answer_is_read_decoded() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(
            body=gzip.compress(b'{"ok":true}'), headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
        )

    runner, url = await _aiohttp_server(handler)
    pool = LeanPool()
    try:
        async with await pool.request(url, b"{}", {}) as response:
            assert (response.content_length, await response.read()) == (None, b'{"ok":true}')
    finally:
        await pool.close()
        await runner.cleanup()


async def _raw_server(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/mcp"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return head + await reader.readexactly(length)


async def test_a_kept_request_head_is_the_one_made_for_each_request_and_a_bad_one_is_refused_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool keeps each request head up to its framing (`MAX_STARTS`, emptied when full; never
    one with `Authorization`, `Mcp-Param-*` or over `MAX_KEPT_START` bytes): the bytes on the wire
    are `request_head`'s for every request, whatever its body or fields."""
    monkeypatch.setattr(lean, "MAX_STARTS", 2)
    seen: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while not reader.at_eof():
            try:
                seen.append(await _read_request(reader))
            except asyncio.IncompleteReadError:
                break
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
        writer.close()

    server, url = await _raw_server(answer)
    netloc = url.split("/")[2]
    sent = [
        (b"{}", {"Mcp-Session-Id": "a"}),
        (b'{"x":1}', {"Mcp-Session-Id": "a"}),
        (b"{}", {"Mcp-Session-Id": "b"}),
        (b"[]", {"Mcp-Session-Id": "c", "Accept": "application/json"}),
        (b"{}", {"Mcp-Session-Id": "a"}),
        (b"{}", {"Mcp-Session-Id": "a", "authorization": "Bearer s3cret"}),
        (b"{}", {"Mcp-Session-Id": "a", "MCP-Param-Card": "4111"}),
        (b"{}", {"Mcp-Session-Id": "a", "X-Big": "b" * 4096}),
    ]
    pool = LeanPool(read_timeout_s=5)
    try:
        for body, headers in sent:
            async with await pool.request(url, body, headers) as response:
                assert (response.status, await response.read()) == (200, b"{}")
            kept = b"".join(pool._starts.values())  # never a secret, a call's own value or a long head
            assert (b"s3cret" in kept, b"4111" in kept, b"bbbb" in kept) == (False, False, False)
        for _ in range(2):
            with pytest.raises(ValueError, match="cannot be sent"):
                await pool.request(url, b"{}", {"X": "a\r\nInjected: 1"})
        assert len(pool._starts) <= 2
    finally:
        await pool.close()
        server.close()
        await server.wait_closed()
    assert seen == [request_head("POST", "/mcp", netloc, headers, len(body)) + body for body, headers in sent]


async def test_a_chunked_answer_cut_anywhere_arrives_whole() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        for at in range(len(CHUNKED)):
            writer.write(CHUNKED[at : at + 1])
            await writer.drain()
        writer.close()

    server, url = await _raw_server(answer)
    pool = LeanPool()
    try:
        response = await pool.request(url, b"{}", {})
        assert await response.read() == b"hello, world"
    finally:
        await pool.close()
        server.close()


async def _closing(after: bytes) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        writer.write(after)
        await writer.drain()
        writer.close()

    return answer


async def test_a_connection_closed_before_the_answer_is_a_server_disconnect() -> None:
    server, url = await _raw_server(await _closing(b""))
    pool = LeanPool()
    try:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await pool.request(url, b"{}", {})
    finally:
        await pool.close()
        server.close()


async def test_a_body_cut_short_is_a_payload_error() -> None:
    server, url = await _raw_server(await _closing(LENGTH[:-4]))
    pool = LeanPool()
    try:
        response = await pool.request(url, b"{}", {})
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()
    finally:
        await pool.close()
        server.close()


async def test_a_refused_connection_is_aiohttps_connector_error() -> None:
    server, url = await _raw_server(await _closing(b""))
    server.close()
    await server.wait_closed()
    pool = LeanPool()
    with pytest.raises(aiohttp.ClientConnectorError) as raised:
        await pool.request(url, b"{}", {})
    assert raised.type is aiohttp.ClientConnectorError
    await pool.close()


async def test_a_silent_backend_is_a_read_timeout() -> None:
    heard = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _read_request(reader)
        heard.set()
        await reader.read()  # never answers; the client gives up

    server, url = await _raw_server(answer)
    pool = LeanPool(read_timeout_s=0.3)
    try:
        with pytest.raises(aiohttp.SocketTimeoutError):
            await pool.request(url, b"{}", {})
        assert heard.is_set()
    finally:
        await pool.close()
        server.close()


async def test_an_answer_given_up_midway_closes_its_connection_and_the_next_request_opens_another() -> None:
    connections: list[int] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        while True:
            try:
                await _read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n")
            await writer.drain()

    server, url = await _raw_server(answer)
    pool = LeanPool()
    try:
        first = await pool.request(url, b"{}", {})
        stream: AsyncIterator[bytes] = first.content.iter_any()
        assert await stream.__anext__() == b"abc"
        first.release()
        second = await pool.request(url, b"{}", {})
        assert await second.content.iter_any().__anext__() == b"abc"
        second.release()
        assert len(connections) == 2
    finally:
        await pool.close()
        server.close()
