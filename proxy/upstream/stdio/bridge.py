"""The Streamable HTTP face of one stdio backend's processes (docs/decisions.md §55, §70, §116).

`Bridge.answer` is what the endpoint answers a POST (`Answer`: a JSON body, an empty 202, or an
SSE stream carrying what the process sends for the request up to its response), whoever asks.
Two callers: the bridge's HTTP handlers on the private Unix socket (`post`, `get`, `delete`),
which GET streams, DELETEs and anything outside the proxy's own code use; and the connector's
POSTs (`StdioEndpoint.post`), which take the answer in the proxy's own event loop as a
`BridgeResponse` (it reads like aiohttp's client response) without crossing the socket: a
relayed or translated call costs no HTTP hop more than over an HTTP backend.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from translators import jsonrpc, multiplex
from translators.errors import INVALID_REQUEST, McpError, session_not_found
from translators.protocol import H_SESSION_ID

from ..endpoint import BackendUnreachable
from ..inbox import Deadlines
from .session import Pending, VirtualSession

PROBE_HEADER = "X-Mcp-Tasks-Proxy-Probe"
"""The header carrying the connector's probe secret (`StdioEndpoint.probe_headers`); a relay never
passes a client's header of that name on, and without the secret it means nothing."""
OWN_HEADER = "X-Mcp-Tasks-Proxy-Own"
"""The header carrying the same secret on the `initialize` of a session the proxy's own session
face opens (`StdioEndpoint.own_session_headers`): kept while the proxy holds it, never ended for
being idle here (its clients' proxy sessions may be in use without reaching it; decision 140)."""
CALLER_HEADER = "X-Mcp-Tasks-Proxy-Caller"
"""The header naming, on an `initialize`, the proxy's principal of the caller a session opens for
(`Bridge.caller_value`: the principal and a MAC of it under the probe secret), which keys the
process under `process_scope = "principal"` (decision 144); without a valid one the pool keys by
`Authorization`, as before."""
JSON = "application/json"
JSON_HEADERS = {"Content-Type": JSON}
"""A JSON answer's headers without a session id (shared: never changed)."""
_JSON_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict(JSON_HEADERS))
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + jsonrpc.dumps(message) + b"\n\n"


class Answer:
    """The bridge's answer to one POST: `status`, `headers`, and either `body` (bytes: JSON, or
    empty) or a stream (`pending` of `session`, whose first message `first` is already taken).
    A JSON answer keeps its `message` and is encoded only when its `body` is read: a caller that
    takes the message itself (the proxy's own session wire) neither encodes nor parses it."""

    __slots__ = ("status", "headers", "_body", "message", "line", "session", "pending", "first", "refusal")

    def __init__(self, status: int, headers: dict[str, str], body: bytes = b""):
        self.status = status
        self.headers = headers
        self._body = body
        self.message: dict[str, Any] | None = None
        """The JSON-RPC message a JSON answer's body holds (None for any other answer: `json`)."""
        self.line: tuple[bytes, int] | None = None
        """The process's line `message` was decoded from and the process's id in it (`Pending.line`)."""
        self.session: VirtualSession | None = None
        self.pending: Pending | None = None
        self.first: dict[str, Any] | None = None
        self.refusal: McpError | None = None
        """Set when the request never reached a process, which the in-process caller raises: the
        bridge's own refusal, counted `proxy_refused` (decisions 141, 148), or, for an `initialize`
        that found no process running, a `BackendUnreachable`, as a connection refused over HTTP
        (decision 149)."""

    @property
    def body(self) -> bytes:
        message = self.message
        if message is not None and not self._body:
            line = self.line
            spliced = multiplex.line_with_id(line[0], line[1], message["id"]) if line is not None else None
            self._body = spliced if spliced is not None else jsonrpc.dumps(message)
        return self._body

    @classmethod
    def json(cls, message: dict[str, Any], status: int = 200, session_id: str | None = None,
             line: tuple[bytes, int] | None = None) -> Answer:
        headers = JSON_HEADERS if session_id is None else {"Content-Type": JSON, H_SESSION_ID: session_id}
        answer = cls(status, headers)
        answer.message, answer.line = message, line
        return answer

    @classmethod
    def stream(cls, session: VirtualSession, pending: Pending, first: dict[str, Any]) -> Answer:
        """An SSE answer: what `pending` of `session` receives, its first message `first` already taken."""
        answer = cls(200, dict(SSE_HEADERS))
        answer.session, answer.pending, answer.first = session, pending, first
        return answer

    @classmethod
    def refused(cls, request_id: jsonrpc.RequestId | None, error: McpError) -> Answer:
        """The bridge's answer to a request it did not pass to a process (HTTP 400 unless `error`
        says: 503 for a bound reached, 502 for no process running)."""
        answer = cls.json(jsonrpc.error_response(request_id, error), error.http_status or 400)
        answer.refusal = error
        return answer


def _abandon(session: VirtualSession, pending: Pending) -> None:
    """The POST carrying `pending` went away before its response: the process is told."""
    for request_id, candidate in list(session.inflight.items()):
        if candidate is pending:
            session.slot.cancel(session, request_id)


def _refused(error: McpError) -> web.Response:
    """A GET or DELETE the bridge refuses, in the words and status the proxy's own session face
    gives (`proxy.faces.session`): a JSON-RPC error without an id, so the relay passes it on as
    the answer of a server, not as an HTTP error without a body (docs/decisions.md §138)."""
    return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(None, error)), status=error.http_status or 400, content_type=JSON)


def _read_timeout() -> aiohttp.SocketTimeoutError:
    """What a request's stream raises when the process sent nothing for it within the read bound
    (aiohttp's `sock_read`, as over HTTP)."""
    return aiohttp.SocketTimeoutError("Timeout on reading data from socket")


class Bridge:
    """The Streamable HTTP endpoint of one stdio backend (POST, GET, DELETE `/mcp`).
    `probe_secret`: the value of `PROBE_HEADER` that marks the proxy's own probe; `max_body`: the
    longest request body taken (413 beyond, as aiohttp's `client_max_size`)."""

    def __init__(self, pool: Any, probe_secret: str, max_body: int):
        self.pool = pool
        self.probe_secret = probe_secret.encode()
        self.max_body = max_body
        self.deadlines = Deadlines(_read_timeout)
        """The read bounds of the POSTs waiting for the process (one timer for them all)."""

    def _mac(self, principal: str) -> str:
        return hmac.digest(self.probe_secret, principal.encode("utf-8", "surrogatepass"), "sha256").hex()[:32]

    def caller_value(self, principal: str) -> str:
        """The `CALLER_HEADER` value that names `principal` (inverse: `caller`)."""
        return f"{principal}.{self._mac(principal)}"

    def caller(self, headers: Mapping[str, str]) -> str | None:
        """The principal a valid `CALLER_HEADER` names; None without one, or for a value the proxy
        did not make (a client's header of that name, forwarded by `forward_headers`, names nobody)."""
        value = headers.get(CALLER_HEADER)
        if not value:
            return None
        principal, _, mac = value.rpartition(".")
        if principal and hmac.compare_digest(mac.encode(), self._mac(principal).encode()):
            return principal
        return None

    async def answer(self, body: bytes, headers: Mapping[str, str], timeout_s: float | None = None, *,
                     parsed: dict[str, Any] | jsonrpc.Message | None = None) -> Answer:
        """Answer one POST of `body` with these `headers` (case-insensitive: `Mcp-Session-Id`,
        `Authorization`, `PROBE_HEADER`, `OWN_HEADER`, `CALLER_HEADER`); `parsed`: the message `body` holds, when the caller has it
        (classified, not decoded again). A request's answer is JSON when its response comes first,
        else a stream (`Answer.pending`: the caller takes it to its end or abandons it, see
        `BridgeResponse`). Raises aiohttp's `SocketTimeoutError` after `timeout_s` without a message."""
        if len(body) > self.max_body:
            text = f"Maximum request body size {self.max_body} exceeded, actual body size {len(body)}"
            return Answer(413, {"Content-Type": "text/plain; charset=utf-8"}, text.encode())
        try:
            if isinstance(parsed, jsonrpc.Message):
                message = parsed
            else:
                message = jsonrpc.parse(body) if parsed is None else jsonrpc.classify(parsed)
        except McpError as exc:
            return Answer.json(jsonrpc.error_response(None, exc), 400)
        session_id = headers.get(H_SESSION_ID)
        if session_id is None:
            if message.kind != "request" or message.method != "initialize":
                error = McpError(INVALID_REQUEST, "Bad Request: Missing session ID")  # the probe reads it as a server's
                return Answer.json(jsonrpc.error_response(message.id, error), 400)
            probe = hmac.compare_digest(headers.get(PROBE_HEADER, "").encode(), self.probe_secret)
            own = hmac.compare_digest(headers.get(OWN_HEADER, "").encode(), self.probe_secret)
            try:
                session = await self.pool.open_session(message.params, headers.get("Authorization"), probe=probe, kept=own,
                                                       caller=self.caller(headers))
            except McpError as exc:
                if exc.by_backend:  # no process running: nothing was sent, as a connection refused over HTTP (§149)
                    exc = BackendUnreachable(exc.code, exc.message, http_status=exc.http_status or 502)
                return Answer.refused(message.id, exc)  # else a bound of the pool's (HTTP 503), the proxy's (§148)
            return Answer.json(jsonrpc.result_response(message.id, session.slot.initialize_result), session_id=session.id)
        session = self.pool.get(session_id)
        if session is None:
            return Answer.json(jsonrpc.error_response(message.id, session_not_found()), 404)
        if message.kind == "notification":
            if message.method != "initialize":  # the process was initialized once, by the proxy (decision 141)
                session.slot.notify(session, message.raw)
            return Answer(202, {})
        if message.kind == "response":
            session.slot.answer(session, message.raw)
            return Answer(202, {})
        if message.method == "initialize":  # as the proxy's own sessions answer it (docs/behaviour.md §2 rule 4)
            return Answer.refused(message.id, McpError(INVALID_REQUEST, "Session already initialized", http_status=400))
        pending = session.slot.request(session, message.raw, body)
        try:
            first, final = await pending.queue.get(timeout_s, self.deadlines)
        except BaseException:
            _abandon(session, pending)
            session.slot.done(session, pending)
            raise
        if final:
            session.slot.done(session, pending)
            return Answer.json(first, pending.status, line=pending.line)
        return Answer.stream(session, pending, first)

    # the HTTP handlers on the private socket ----------------------------------------------------------

    async def post(self, request: web.Request) -> web.StreamResponse:
        answer = await self.answer(await request.read(), request.headers)
        pending, session = answer.pending, answer.session
        if pending is None or session is None:
            return web.Response(body=answer.body or None, status=answer.status, headers=answer.headers)
        response = web.StreamResponse(headers=answer.headers)
        try:
            await response.prepare(request)
            message: dict[str, Any] | None = answer.first
            while message is not None:
                await response.write(_event(message))
                message, final = await pending.queue.get()
                if final:
                    await response.write(_event(message))
                    message = None
            await response.write_eof()
            return response
        except (asyncio.CancelledError, ConnectionError):
            _abandon(session, pending)
            raise
        finally:
            session.slot.done(session, pending)

    async def get(self, request: web.Request) -> web.StreamResponse:
        session = self.pool.get(request.headers.get(H_SESSION_ID, ""))
        if session is None:
            if H_SESSION_ID in request.headers:
                return _refused(session_not_found())
            return _refused(McpError(INVALID_REQUEST, "Method Not Allowed: a GET stream needs a session", http_status=405))
        if session.stream is not None:
            return _refused(McpError(INVALID_REQUEST, "Conflict: Only one SSE stream is allowed per session", http_status=409))
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        while session.backlog:
            queue.put_nowait(session.backlog.popleft())
        session.stream = queue
        response = web.StreamResponse(headers=SSE_HEADERS)
        unsent: dict[str, Any] | None = None
        try:
            await response.prepare(request)
            while not session.lost:
                unsent = await queue.get()
                if not unsent:
                    break
                await response.write(_event(unsent))
                unsent = None
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if session.stream is queue:
                session.stream = None
                session.last_used = time.monotonic()  # idle from now (decision 140)
            # What this stream took and did not write (the client went away while a question was on
            # its way) goes back to the backlog, first, for the next stream or asking request: a
            # question the process sent once is never dropped with a stream that ended.
            left = [unsent] if unsent else []
            while not queue.empty():
                queued = queue.get_nowait()
                if queued:
                    left.append(queued)
            for message in reversed(left):
                session.backlog.appendleft(message)
        return response

    async def delete(self, request: web.Request) -> web.StreamResponse:
        session = self.pool.get(request.headers.get(H_SESSION_ID, ""))
        if session is None:
            return _refused(session_not_found())
        self.pool.end(session)
        return web.Response(status=200)


class BridgeResponse:
    """A bridge's `Answer` taken in the proxy's own event loop, read like aiohttp's client
    response (`status`, `headers`, `content_length`, `read()`, `content.iter_any()`, `release()`,
    `async with`). A stream's SSE events are framed as the socket would carry them; releasing it
    before its response tells the process the request is abandoned (`notifications/cancelled`)."""

    __slots__ = ("status", "headers", "_answer", "_timeout_s", "_deadlines", "_over")

    def __init__(self, answer: Answer, timeout_s: float | None, deadlines: Deadlines):
        self.status = answer.status
        self.headers: CIMultiDictProxy[str] = _JSON_HEADERS if answer.headers is JSON_HEADERS else CIMultiDictProxy(CIMultiDict(answer.headers))
        self._answer = answer
        self._timeout_s = timeout_s
        self._deadlines = deadlines
        self._over = False
        """Every byte was handed out (or the response was released)."""

    @property
    def content_length(self) -> int | None:
        return None if self._answer.pending is not None else len(self._answer.body)

    @property
    def json_message(self) -> dict[str, Any] | None:
        """The JSON-RPC message of a JSON answer, decoded already (None for any other answer):
        what `read()` would give, for a reader that would parse it (`session_wire.read_answer`)."""
        answer = self._answer
        if answer.message is not None:
            self._over = True
        return answer.message

    @property
    def content(self) -> BridgeResponse:
        return self

    def iter_any(self) -> BridgeResponse:
        return self

    def __aiter__(self) -> BridgeResponse:
        return self

    async def __anext__(self) -> bytes:
        if self._over:
            raise StopAsyncIteration
        answer = self._answer
        pending = answer.pending
        if pending is None or answer.session is None:
            self._over = True
            if not answer.body:
                raise StopAsyncIteration
            return answer.body
        if answer.first is not None:
            first, answer.first = answer.first, None
            return _event(first)
        message, final = await pending.queue.get(self._timeout_s, self._deadlines)
        if final:
            self._over = True
            answer.session.slot.done(answer.session, pending)
        return _event(message)

    async def read(self) -> bytes:
        answer = self._answer
        if answer.pending is None:
            self._over = True
            return answer.body
        return b"".join([chunk async for chunk in self])

    def release(self) -> None:
        answer = self._answer
        if not self._over:
            self._over = True
            if answer.pending is not None and answer.session is not None:
                _abandon(answer.session, answer.pending)
                answer.session.slot.done(answer.session, answer.pending)

    def close(self) -> None:
        self.release()

    async def __aenter__(self) -> BridgeResponse:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
