"""The proxy's own upstream client for POSTs: keep-alive HTTP/1.1 connections on asyncio's
transports (docs/decisions.md §115, §128; docs/performance.md "Relay"), used by relays and by the
session and modern wires of translations.

A POST passes bytes: the request head and body go out in one write, the answer's body
comes back as the chunks the socket gives, never parsed here. `LeanPool.request` returns a
`LeanResponse`, which offers what the relay, the wires and `Endpoint` read of an aiohttp response
(`status`, `headers`, `content_length`, `read()`, `content.iter_any()`, `release()`, `async with`),
so the code after it does not tell the two apart. Failures are aiohttp's own exception classes
(`ClientConnectorError` when no connection could be made, `ServerDisconnectedError` when the
backend closed the connection before answering, `ClientOSError` for a reset,
`ClientPayloadError` for a body that broke off, `ConnectionTimeoutError` / `SocketTimeoutError`
for the connect and read bounds), so every rule built on them (resends, waits, the messages
clients see) holds unchanged.

Bounds: `connect_timeout_s` to connect; `read_timeout_s` between two reads while an answer is
awaited or read (aiohttp's `sock_read`; None: none); an idle connection is kept `KEEPALIVE_S` and
at most `MAX_IDLE` of them per pool. Reading from the socket pauses while more than
`READ_HIGH_WATER` bytes of an answer wait to be taken.
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import Awaitable, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.client_reqrep import ConnectionKey
from multidict import CIMultiDictProxy

from translators.param_headers import PREFIX as PARAM_PREFIX

from .http1 import ProtocolError, ResponseParser, framing, request_start

KEEPALIVE_S = 15.0
"""An idle connection older than this is closed rather than used (aiohttp's default too)."""
MAX_IDLE = 100
MAX_STARTS = 1024
"""Request heads (up to their framing) a pool keeps, by method, URL and header fields: a backend's
requests repeat a few (one a session), and each is made and checked once (emptied when full).
Never kept: a head of over `MAX_KEPT_START` bytes, or one that carries a secret or a call's own
values (`Authorization`, `Mcp-Param-*`): made anew for each request, as it is sent."""
MAX_KEPT_START = 2048
READ_HIGH_WATER = 256 * 1024
DECODED = ("gzip", "deflate", "x-gzip")


class LeanResponse:
    """One answer on one connection: its head (`status`, `reason`, `headers`, `content_length`)
    and its body as it arrives. The connection goes back to the pool when the body is whole;
    `release()` before that closes it."""

    __slots__ = ("status", "reason", "headers", "content_length", "_conn", "_chunks", "_buffered", "_done", "_error",
                 "_waiter", "_decoder")

    def __init__(self, conn: _Connection, status: int, reason: str, headers: CIMultiDictProxy[str], content_length: int | None):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.content_length = content_length
        self._conn: _Connection | None = conn
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._done = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._decoder = None
        encoding = headers.get("Content-Encoding", "").strip().lower()
        if encoding in DECODED:
            self._decoder = zlib.decompressobj(47 if encoding != "deflate" else zlib.MAX_WBITS)
            self.content_length = None  # the length of the encoded body

    @property
    def content(self) -> LeanResponse:
        """The body stream (`iter_any()`), as aiohttp's `response.content`."""
        return self

    def _feed(self, chunk: bytes) -> None:
        if self._decoder is not None:
            chunk = self._decoder.decompress(chunk)
        if chunk:
            self._chunks.append(chunk)
            self._buffered += len(chunk)
            if self._buffered > READ_HIGH_WATER and self._conn is not None:
                self._conn.pause()
        self._wake()

    def _finish(self, error: BaseException | None = None) -> None:
        if self._done:
            return
        if error is None and self._decoder is not None:
            rest = self._decoder.flush()
            if rest:
                self._chunks.append(rest)
        self._done = True
        self._error = error
        self._conn = None
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        conn = self._conn
        if conn is not None:
            conn.resume()
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        await waiter

    async def read(self) -> bytes:
        """The whole body (decoded when the backend compressed it). Raises what broke it off."""
        while not self._done:
            await self._wait()
        if self._error is not None:
            raise self._error
        chunks = self._chunks
        self._buffered = 0
        if len(chunks) == 1:
            return chunks.popleft()
        body = b"".join(chunks)
        chunks.clear()
        return body

    def iter_any(self) -> LeanResponse:
        """An async iterator of the body as it comes: each step everything that has come since
        the last (as aiohttp's `iter_any`)."""
        return self

    def __aiter__(self) -> LeanResponse:
        return self

    async def __anext__(self) -> bytes:
        while not self._chunks:
            if self._done:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            await self._wait()
        chunks = self._chunks
        if len(chunks) == 1:
            chunk = chunks.popleft()
            self._buffered -= len(chunk)
            return chunk
        chunk = b"".join(chunks)  # everything that has come, as aiohttp's `iter_any` gives it
        chunks.clear()
        self._buffered = 0
        return chunk

    def release(self) -> None:
        """Done with the answer: a connection whose body is not whole yet is closed."""
        conn = self._conn
        if conn is not None and not self._done:
            self._conn = None
            self._done = True
            self._error = aiohttp.ClientConnectionError("Connection closed")
            conn.abandon()

    def close(self) -> None:
        self.release()

    async def __aenter__(self) -> LeanResponse:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time, its answer parsed as the bytes come."""

    def __init__(self, pool: LeanPool, key: tuple[str, int], loop: asyncio.AbstractEventLoop):
        self.pool = pool
        self.key = key
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        self.response: LeanResponse | None = None
        self.head_waiter: asyncio.Future[LeanResponse] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.last_read = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self.paused = False
        self.write_paused: asyncio.Future[None] | None = None

    # asyncio.Protocol --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None:  # nothing was asked: the connection is not usable any more
            self._close()
            return
        if self.timer is not None:
            self.last_read = self.loop.time()
        try:
            body = parser.feed(data)
        except ProtocolError as exc:
            self._fail(aiohttp.ClientResponseError(_NO_INFO, (), status=400, message=f"Invalid response: {exc}"))
            return
        response = self.response
        if response is None:
            head = parser.head
            if head is None:
                return
            response = self.response = LeanResponse(self, head.status, head.reason, head.headers, head.content_length)
            waiter = self.head_waiter
            self.head_waiter = None
            if waiter is not None and not waiter.done():
                waiter.set_result(response)
        if body:  # the chunks of one read are passed on as one piece
            response._feed(body[0] if len(body) == 1 else b"".join(body))
        if parser.done:
            self._complete()

    def eof_received(self) -> bool:
        parser = self.parser
        if parser is not None:
            try:
                parser.eof()
            except ProtocolError:
                self._fail(self._disconnected())
                return False
            self._complete()
        self._close()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        if self.parser is not None:
            parser = self.parser
            if exc is None and parser.head is not None:
                try:
                    parser.eof()
                except ProtocolError:
                    pass
                else:
                    self._complete()
                    return
            self._fail(self._disconnected(exc))

    def pause_writing(self) -> None:
        if self.write_paused is None:
            self.write_paused = self.loop.create_future()

    def resume_writing(self) -> None:
        waiter, self.write_paused = self.write_paused, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # the request -----------------------------------------------------------------------------------

    async def send(self, head: bytes, body: bytes, read_timeout_s: float | None) -> LeanResponse:
        """Write one request; its answer once its head is in. Raises aiohttp's exceptions."""
        assert self.transport is not None
        self.parser = ResponseParser()
        self.response = None
        waiter: asyncio.Future[LeanResponse] = self.loop.create_future()
        self.head_waiter = waiter
        if read_timeout_s is not None:
            self.last_read = self.loop.time()
            if self.timer is None:  # one timer a connection, checked when due rather than reset per read
                self.timer = self.loop.call_at(self.last_read + read_timeout_s, self._check_read, read_timeout_s)
        self.transport.write(head + body if len(body) < 65_536 else head)
        if len(body) >= 65_536:
            self.transport.write(body)
        try:
            if self.write_paused is not None:
                await self.write_paused
            return await waiter
        except asyncio.CancelledError:
            self.abandon()
            raise

    def _check_read(self, timeout_s: float) -> None:
        self.timer = None
        if self.parser is None:  # idle: the next request starts the timer again
            return
        due = self.last_read + timeout_s
        if self.loop.time() < due:
            self.timer = self.loop.call_at(due, self._check_read, timeout_s)
            return
        self._fail(aiohttp.SocketTimeoutError("Timeout on reading data from socket"))

    def _complete(self) -> None:
        """The answer is whole: the connection goes back to the pool (or is closed)."""
        parser, response = self.parser, self.response
        self.parser = None
        self.response = None
        if response is not None:
            response._finish()
        assert parser is not None and parser.head is not None
        if parser.head.keep_alive and not parser.extra and not self.closed:
            self.resume()
            self.idle_since = self.loop.time()
            self.pool.put_back(self)
        else:
            self._close()

    def _fail(self, error: BaseException) -> None:
        waiter, response = self.head_waiter, self.response
        self.head_waiter = None
        self.parser = None
        self.response = None
        self._stop_timer()
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        if response is not None:
            response._finish(error)
        self._close()

    def _disconnected(self, exc: BaseException | None = None) -> BaseException:
        if self.response is not None:  # the answer had begun: its body broke off
            return aiohttp.ClientPayloadError("Response payload is not completed")
        if exc is not None:
            return aiohttp.ClientOSError(*(exc.args or (0, str(exc))))
        return aiohttp.ServerDisconnectedError()

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def abandon(self) -> None:
        """The caller gave the answer up before its end: the connection cannot be reused."""
        self.parser = None
        self.response = None
        self.head_waiter = None
        self._stop_timer()
        self._close()

    def pause(self) -> None:
        if not self.paused and self.transport is not None and not self.closed:
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def _close(self) -> None:
        self._stop_timer()
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
            if self.transport is not None:
                self.transport.close()


class _NoInfo:
    """Stands for the request info aiohttp's `ClientResponseError` wants (`real_url` for its text)."""

    real_url = "(relayed request)"


_NO_INFO: Any = _NoInfo()


def _place(url: str) -> tuple[tuple[str, int], str, str]:
    """((host, port), request target, `Host` value) of a plain `http` URL. Raises `ValueError`."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"the relay's client speaks plain http, not {url!r}")
    target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    return (parts.hostname, parts.port or 80), target, parts.netloc


_UNKEPT_PREFIX = PARAM_PREFIX.lower()


def _keepable(start: bytes, headers: Mapping[str, str]) -> bool:
    """Whether a request head may be kept (`MAX_STARTS`): short, and carrying no secret or call's own values."""
    return len(start) <= MAX_KEPT_START and not any(
        name.lower() == "authorization" or name.lower().startswith(_UNKEPT_PREFIX) for name in headers)


class LeanPool:
    """Keep-alive connections to one backend's host and port (`http` URLs; `unix`: a Unix socket
    path instead)."""

    def __init__(self, *, connect_timeout_s: float = 10.0, read_timeout_s: float | None = None, unix: str | None = None):
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.unix = unix
        self._idle: dict[tuple[str, int], deque[_Connection]] = {}
        self._places: dict[str, tuple[tuple[str, int], str, str]] = {}
        """URL → ((host, port), request target, Host header): split once (a backend has one or two)."""
        self._starts: dict[tuple[str, str, tuple[tuple[str, str], ...]], bytes] = {}
        """(method, URL, header fields) → the request head up to its framing (`MAX_STARTS`)."""
        self._all: set[_Connection] = set()
        self.closed = False

    def request(self, url: str, body: bytes, headers: Mapping[str, str], *, method: str = "POST",
                read_timeout_s: float | None = -1.0) -> Awaitable[LeanResponse]:
        """Send `method url` with `body` and `headers`; the answer once its head is in (the caller
        releases it, or reads it whole). `read_timeout_s` -1: the pool's. Raises aiohttp's
        exceptions (see the module docstring) and `ValueError` for a URL that is not `http`.
        (A plain function handing back the connection's coroutine: one coroutine less a call.)"""
        key, head = self.head(method, url, headers, len(body) if body or method == "POST" else None)
        host, port = key
        timeout = self.read_timeout_s if read_timeout_s == -1.0 else read_timeout_s
        idle = self._idle.get(key)
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            if now - conn.idle_since > KEEPALIVE_S:
                conn._close()
                continue
            return conn.send(head, body, timeout)
        return self._connected(host, port, head, body, timeout)

    def head(self, method: str, url: str, headers: Mapping[str, str], length: int | None) -> tuple[tuple[str, int], bytes]:
        """The (host, port) of `url` and the head of a request to it (`http1.request_head`), its part
        before the framing made once for each method, URL and header fields (`MAX_STARTS`; some are
        never kept, `MAX_KEPT_START`)."""
        place = self._places.get(url)
        if place is None:
            place = self._places[url] = _place(url)
        key, target, netloc = place
        made = (method, url, tuple(headers.items()))
        start = self._starts.get(made)
        if start is None:
            start = request_start(method, target, netloc, headers)
            if _keepable(start, headers):
                if len(self._starts) >= MAX_STARTS:
                    self._starts.clear()
                self._starts[made] = start
        return key, start + framing(length)

    async def _connected(self, host: str, port: int, head: bytes, body: bytes, timeout: float | None) -> LeanResponse:
        """`head` and `body` sent on a new connection; its answer."""
        conn = await self._connect(host, port)
        return await conn.send(head, body, timeout)

    async def _connect(self, host: str, port: int) -> _Connection:
        if self.closed:
            raise aiohttp.ClientConnectionError("the relay's connection pool is closed")
        loop = asyncio.get_running_loop()
        conn = _Connection(self, (host, port), loop)
        try:
            if self.unix is not None:
                connecting = loop.create_unix_connection(lambda: conn, self.unix)
            else:
                connecting = loop.create_connection(lambda: conn, host, port)
            await asyncio.wait_for(connecting, self.connect_timeout_s)
        except TimeoutError:
            raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host http://{host}:{port}") from None
        except OSError as exc:
            key = ConnectionKey(host, port, False, True, None, None, None)
            raise aiohttp.ClientConnectorError(key, exc) from None
        self._all.add(conn)
        return conn

    def put_back(self, conn: _Connection) -> None:
        if self.closed:
            conn._close()
            return
        idle = self._idle.get(conn.key)
        if idle is None:
            idle = self._idle[conn.key] = deque()
        if len(idle) >= MAX_IDLE:
            conn._close()
            return
        idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        self._all.discard(conn)

    async def close(self) -> None:
        """Close every connection (an answer being read breaks off)."""
        self.closed = True
        for conn in list(self._all):
            conn.abandon()
        self._idle.clear()
        self._all.clear()
