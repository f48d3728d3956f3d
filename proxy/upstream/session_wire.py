"""Upstream connector for the session wire (Streamable HTTP, 2025-11-25): v1 and v2-session backends.

One `UpstreamSession` is one MCP session on one backend: `initialize` + `notifications/initialized`,
the `Mcp-Session-Id` it was given, requests answered as JSON or SSE, server→client requests
answered on the backend's behalf, and detection of a session the backend forgot (404).
Source: MCP core 2025-11-25 §Transports (Streamable HTTP); docs/wire.md §5.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp

from translators import jsonrpc
from translators.errors import METHOD_NOT_FOUND, McpError, backend_unavailable, bridged_unavailable, from_backend
from translators.protocol import H_PROTOCOL_VERSION, H_SESSION_ID, LEGACY_VERSION

from ..sse import iter_events
from .answer_bound import ANSWER_BOUND, bounded_body, bounded_chunks, too_large
from .endpoint import ACCEPT_BOTH, IDEMPOTENT_METHODS, Endpoint
from .tls import failure

log = logging.getLogger(__name__)

ServerRequestHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]
"""Given a server→client JSON-RPC request, return the JSON-RPC response to send back at once, or
None when the handler keeps the request and answers later with `UpstreamSession.respond`."""
NotificationHandler = Callable[[dict[str, Any]], Awaitable[None]]

_background: set[asyncio.Future[Any]] = set()


class SessionLost(Exception):
    """The backend no longer knows this session (HTTP 404 on a request carrying its id)."""


class UpstreamSession:
    """One MCP session with a session-wire backend.

    `client_capabilities` are declared in `initialize` exactly as given (docs/behaviour.md §4.1).
    After `initialize()`, `server_capabilities`, `server_info`, `instructions` and
    `protocol_version` hold the backend's answer; `session_id` the id it issued (or None).
    There is no way to end one: the proxy never ends an upstream session (docs/decisions.md §2).
    """

    def __init__(self, backend: Endpoint, client_capabilities: Mapping[str, Any], *, session_id: str | None = None,
                 protocol_version: str = LEGACY_VERSION, client_info: Mapping[str, Any] | None = None):
        self.backend = backend
        self.client_capabilities = dict(client_capabilities)
        self.session_id = session_id
        self.protocol_version = protocol_version
        self.client_info = dict(client_info or {"name": "mcp-tasks-proxy", "version": "0.1.0"})
        self.server_capabilities: dict[str, Any] = {}
        self.server_info: dict[str, Any] = {}
        self.instructions: str | None = None
        self.lost = False
        # An adopted session (named by a sealed id: another replica's, or this process's before a restart) may
        # have requests of another process in flight, and the backend routes answers by JSON-RPC id within the
        # session: its ids start at a random 40-bit base, far from the other process's.
        self._ids = itertools.count(1 if session_id is None else (1 << 20) + secrets.randbelow(1 << 40))

    # -- lifecycle -----------------------------------------------------------------------------

    async def initialize(self, headers: Mapping[str, str] | None = None, *,
                         before_initialized: Callable[[UpstreamSession], Awaitable[None]] | None = None) -> dict[str, Any]:
        """Run `initialize` and `notifications/initialized`; return the `InitializeResult`.
        `before_initialized` runs between the two, once the session has its id: a GET stream
        opened there hears what the backend announces when the session starts (docs/behaviour.md
        §4.9, decision 66).

        Raises `McpError` for a backend error or an unreachable/non-MCP backend (HTTP 502).
        """
        self.session_id = None
        params = {"protocolVersion": LEGACY_VERSION, "capabilities": self.client_capabilities, "clientInfo": self.client_info}
        result = await self.request("initialize", params, headers=headers)
        version = result.get("protocolVersion")
        if not isinstance(version, str) or not isinstance(result.get("capabilities"), dict):
            raise backend_unavailable(self.backend.name, "initialize answered without protocolVersion/capabilities")
        self.protocol_version = version
        self.server_capabilities = result["capabilities"]
        self.server_info = result.get("serverInfo") if isinstance(result.get("serverInfo"), dict) else {}
        self.instructions = result.get("instructions") if isinstance(result.get("instructions"), str) else None
        self.lost = False
        if before_initialized is not None:
            await before_initialized(self)
        await self.notify("notifications/initialized", headers=headers)
        return result

    # -- messages ------------------------------------------------------------------------------

    def _headers(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        headers = {"Accept": ACCEPT_BOTH, H_PROTOCOL_VERSION: self.protocol_version, **(extra or {})}
        if self.session_id:
            headers[H_SESSION_ID] = self.session_id
        return headers

    async def notify(self, method: str, params: dict[str, Any] | None = None, *, headers: Mapping[str, str] | None = None) -> None:
        """POST a notification; the backend answers 202. Errors are logged, not raised."""
        await self._post_no_answer(jsonrpc.notification(method, params), headers)

    async def respond(self, message: dict[str, Any], *, headers: Mapping[str, str] | None = None) -> None:
        """POST a JSON-RPC response to a server→client request (the backend answers 202); failures
        are logged (use `deliver` when the caller must know)."""
        await self._post_no_answer(message, headers)

    def _raise_if_lost(self, response: aiohttp.ClientResponse) -> None:
        """A 404 to a request carrying our session id: the backend forgot the session (it is
        marked lost, the backend suspected) — raises `SessionLost`."""
        if response.status == 404 and self.session_id:
            self.lost = True
            self.backend.on_trouble()
            raise SessionLost(self.session_id)

    async def deliver(self, message: dict[str, Any], *, headers: Mapping[str, str] | None = None) -> None:
        """POST a JSON-RPC response the backend waits for, and make sure it was taken.

        Raises `SessionLost` (404: the backend forgot the session) and `McpError` (HTTP 502) when the
        backend cannot be reached or refuses it, so the caller keeps the answer to send again.
        """
        response = await self.backend.post(jsonrpc.dumps(message), self._headers(headers))
        async with response:
            self._raise_if_lost(response)
            if response.status >= 300:
                raise backend_unavailable(self.backend.name, f"answered HTTP {response.status} to an answer it asked for")

    async def _post_no_answer(self, message: dict[str, Any], headers: Mapping[str, str] | None) -> None:
        if self.backend.http.closed:
            return
        try:
            response = await self.backend.post(jsonrpc.dumps(message), self._headers(headers))
        except McpError as exc:
            log.warning("backend %s: could not deliver %s: %s", self.backend.name, message.get("method", "response"), exc.message)
            return
        async with response:
            if response.status == 404 and self.session_id:
                self.lost = True
            elif response.status >= 300:
                log.warning("backend %s answered HTTP %d to a %s", self.backend.name, response.status, message.get("method", "response"))

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        on_server_request: ServerRequestHandler | None = None,
        on_notification: NotificationHandler | None = None,
    ) -> dict[str, Any]:
        """Send one request and return its `result`.

        Server→client requests arriving on the response stream go to `on_server_request` (default:
        `ping` → `{}`, anything else → -32601), whose answer is POSTed back at once, so the backend
        never waits. Notifications go to `on_notification`.

        Raises `McpError` for a JSON-RPC error answer (legacy codes renumbered), `SessionLost` when
        the backend forgot the session (404), and `McpError` with HTTP 502 when the backend is
        unreachable or answers something that is not MCP.
        """
        opened = await self.open(method, params, headers=headers)
        if opened.streamed:
            return await opened.read(on_server_request, on_notification)
        assert opened.result is not None
        return opened.result

    async def open(self, method: str, params: dict[str, Any] | None = None, *, headers: Mapping[str, str] | None = None) -> Opened:
        """Send one request and read its answer when it comes as JSON (`Opened.result`); an answer
        on an SSE stream, where requests for input may come first, is left to `Opened.read`, to
        be read as `request` reads it. A caller that must be free while the backend waits for
        input reads the stream in a task of its own, and needs none for a JSON answer
        (docs/decisions.md §185). Raises as `request` does."""
        request_id = next(self._ids)
        message = jsonrpc.request(request_id, method, params)
        started = time.perf_counter()
        try:
            response = await self.backend.post(jsonrpc.dumps(message), self._headers(headers), idempotent=method in IDEMPOTENT_METHODS,
                                               parsed=message)
            media_type = content_type(response)
            if response.status == 200 and media_type == "text/event-stream":
                self._take_session_id(method, response)
                return Opened(None, self, response, (method, request_id, started), headers)
            async with response:
                self._raise_if_lost(response)  # before an initialize's answer gives the session an id
                self._take_session_id(method, response)
                result = await read_answer(self.backend.name, response, (method, request_id), (refuse_server_request, None, _no_answer),
                                           media_type=media_type)
        except BaseException as exc:
            self.ended(method, request_id, started, headers, exc)
            raise
        self.backend.on_hop(method, time.perf_counter() - started)
        return Opened(result)

    def _take_session_id(self, method: str, response: Any) -> None:
        if method == "initialize" and H_SESSION_ID in response.headers:
            self.session_id = response.headers[H_SESSION_ID]

    def ended(self, method: str, request_id: int, started: float, headers: Mapping[str, str] | None, exc: BaseException) -> None:
        """A request ended without its answer: a refusal counts as the backend's hop; a caller that
        went away is told upstream with `notifications/cancelled`, as the session wire requires (a
        disconnect is not a cancellation there; a task already created is unaffected)."""
        if isinstance(exc, (McpError, SessionLost)):
            self.backend.on_hop(method, time.perf_counter() - started)
        elif isinstance(exc, asyncio.CancelledError) and method != "initialize":
            cancel = self.notify("notifications/cancelled", {"requestId": request_id, "reason": "client disconnected"}, headers=headers)
            task = asyncio.ensure_future(cancel)
            _background.add(task)
            task.add_done_callback(_background.discard)


class Opened:
    """A request sent (`UpstreamSession.open`): its `result` when the answer came as JSON; else
    (`streamed`) the answer is on an SSE stream, read once with `read`."""

    __slots__ = ("result", "_session", "_response", "_sent", "_headers")

    def __init__(self, result: dict[str, Any] | None, session: UpstreamSession | None = None, response: Any = None,
                 sent: tuple[str, int, float] = ("", 0, 0.0), headers: Mapping[str, str] | None = None):
        self.result = result
        self._session = session
        self._response = response
        self._sent = sent
        """(method, JSON-RPC id, `time.perf_counter()` when sent)."""
        self._headers = headers

    @property
    def streamed(self) -> bool:
        return self._response is not None

    async def read(self, on_server_request: ServerRequestHandler | None = None,
                   on_notification: NotificationHandler | None = None) -> dict[str, Any]:
        """The answer from its SSE stream, what comes before it handled as `UpstreamSession.request`
        says. Raises as `request` does."""
        session, response, headers = self._session, self._response, self._headers
        assert session is not None and response is not None, "a streamed answer"
        method, request_id, started = self._sent

        async def respond(answer: dict[str, Any]) -> None:
            await session.respond(answer, headers=headers)

        try:
            async with response:
                result = await read_answer(session.backend.name, response, (method, request_id),
                                           (on_server_request or refuse_server_request, on_notification, respond))
        except BaseException as exc:
            session.ended(method, request_id, started, headers, exc)
            raise
        session.backend.on_hop(method, time.perf_counter() - started)
        return result


async def _no_answer(_answer: dict[str, Any]) -> None:
    """A JSON answer has no stream to carry a server request: nothing is ever answered."""


def content_type(response: Any) -> str:
    """A response's media type, lower-cased, without parameters."""
    return str(response.headers.get("Content-Type", "")).split(";")[0].strip().lower()


Before = tuple[ServerRequestHandler, NotificationHandler | None, Callable[[dict[str, Any]], Awaitable[None]]]
"""What is done with the messages that come before an answer on its SSE stream, (on_server_request,
on_notification, respond): a server request goes to `on_server_request` (a non-None answer is
passed to `respond`), a notification to `on_notification`. A plain tuple: one is made for every
upstream request."""


async def read_answer(backend: str, response: aiohttp.ClientResponse, asked: tuple[str, jsonrpc.RequestId],
                      before: Before, *, media_type: str | None = None) -> dict[str, Any]:
    """The `result` of the answer to the request `asked` (its method and id), read from a JSON or
    SSE response (both wires); on SSE, what comes before it is handled as `before` says.

    Raises `McpError` for a JSON-RPC error answer (legacy codes renumbered) and `McpError` with
    HTTP 502 naming `backend` for anything that is not an MCP answer. Where this context has an
    `ANSWER_BOUND` (a shadow comparison's), a body or stream longer than it is given up
    (`answer_bound.too_large`). `media_type`: the response's `content_type`, when the caller has it.
    """
    method, request_id = asked
    if media_type is None:
        media_type = content_type(response)
    bound = ANSWER_BOUND.get()
    if media_type == "text/event-stream" and response.status == 200:
        chunks: AsyncIterator[bytes] = response.content.iter_any()
        if bound is not None:
            chunks = bounded_chunks(backend, chunks, bound)
        return await _read_stream(backend, chunks, request_id, before)
    if media_type == "application/json":
        try:
            # A stdio backend's answer comes decoded already (`stdio_bridge.BridgeResponse.json_message`).
            if bound is not None and response.content_length is not None and response.content_length > bound.limit:
                raise too_large(bound, backend)
            bridged = getattr(response, "json_message", None)
            if bridged is None and bound is not None:
                answer = jsonrpc.loads(await bounded_body(backend, response, bound))
            else:
                answer = bridged or jsonrpc.loads(await response.read())
        except (ValueError, UnicodeDecodeError):
            raise backend_unavailable(backend, f"answered HTTP {response.status} with a body that is not JSON") from None
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise backend_unavailable(backend, f"connection failed while reading: {exc.__class__.__name__}") from None
        return _result_of(backend, answer, request_id, response.status, bridged=bridged is not None)
    raise backend_unavailable(backend, f"answered HTTP {response.status} with {media_type or 'no content type'} to {method}")


GATEWAY_STATUSES = frozenset({502, 503, 504})
"""Statuses of a gateway (or a proxy) in front of the backend that could not reach it: transient,
whatever the body says, so they fail with HTTP 502 (`backend_unavailable`), which reads ride out."""


def _result_of(backend: str, answer: Any, request_id: jsonrpc.RequestId, status: int, *, bridged: bool = False) -> dict[str, Any]:
    """`bridged`: the answer of the proxy's own bridge to a stdio process, whose gateway status is its
    own words about the process (no gateway stood between)."""
    if isinstance(answer, dict) and answer.get("jsonrpc") == "2.0":
        if "error" in answer and answer.get("id") in (request_id, None, "server-error"):
            if status in GATEWAY_STATUSES:
                if bridged:
                    raise bridged_unavailable(answer["error"], status)
                raise backend_unavailable(backend, f"answered HTTP {status}: {from_backend(answer['error']).message}")
            raise from_backend(answer["error"])
        if "result" in answer and answer.get("id") == request_id and isinstance(answer["result"], dict) and status == 200:
            return answer["result"]
    raise backend_unavailable(backend, f"answered HTTP {status} with something that is not a JSON-RPC response")


async def _read_stream(backend: str, chunks: AsyncIterator[bytes], request_id: jsonrpc.RequestId, before: Before) -> dict[str, Any]:
    on_server_request, on_notification, respond = before
    try:
        async for event in iter_events(chunks):
            try:
                message = jsonrpc.parse(event.data)
            except McpError:
                raise backend_unavailable(backend, "sent an SSE event that is not a JSON-RPC message") from None
            if message.kind == "response":
                if message.id == request_id:
                    return _result_of(backend, message.raw, request_id, 200)
            elif message.kind == "request":
                answer = await on_server_request(message.raw)
                if answer is not None:
                    await respond(answer)
            elif on_notification is not None:
                await on_notification(message.raw)
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise backend_unavailable(backend, f"stream broke: {exc.__class__.__name__}") from None
    raise backend_unavailable(backend, "closed the response stream without answering")


class NoStandaloneStream(Exception):
    """The backend offers no GET stream for this session (HTTP 405)."""


async def listen(
    session: UpstreamSession,
    on_server_request: ServerRequestHandler,
    on_notification: NotificationHandler,
    *,
    headers: Mapping[str, str] | None = None,
    on_open: Callable[[], None] | None = None,
) -> None:
    """Hold the session's standalone GET stream until it ends, dispatching what arrives on it.
    `on_open` is called once the backend has accepted the stream.

    Returns when the backend closes the stream. Raises `SessionLost` (404, and a `ping` on the
    session answered 404 too), `NoStandaloneStream` (405, or 404 for a session the `ping` shows
    alive) and `McpError` (HTTP 502) when the backend is unreachable or answers something else.
    """
    backend = session.backend
    request_headers = {**backend.extra_headers, **session._headers(headers), "Accept": "text/event-stream"}
    try:
        response = await backend.http.get(backend.url, headers=request_headers, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                                          **backend.request_options)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        tls = failure(exc)
        raise backend_unavailable(backend.name, f"GET stream: TLS handshake failed: {tls}" if tls else
                                  f"GET stream: {exc.__class__.__name__}") from None
    async with response:
        refused = response.status == 404
        if response.status == 405:
            raise NoStandaloneStream(backend.name)
        if not refused:
            if response.status != 200 or not response.headers.get("Content-Type", "").startswith("text/event-stream"):
                raise backend_unavailable(backend.name, f"GET stream answered HTTP {response.status}")
            if on_open is not None:
                on_open()
            await _dispatch(session, response, on_server_request, on_notification, headers)
    if refused:
        await _known_to_be_alive(session, headers)
        raise NoStandaloneStream(backend.name)


async def _dispatch(session: UpstreamSession, response: aiohttp.ClientResponse, on_server_request: ServerRequestHandler,
                    on_notification: NotificationHandler, headers: Mapping[str, str] | None) -> None:
    """What arrives on an accepted GET stream, until it ends or breaks."""
    try:
        async for event in iter_events(response.content.iter_any()):
            try:
                message = jsonrpc.parse(event.data)
            except McpError:
                log.warning("backend %s sent a GET-stream event that is not JSON-RPC", session.backend.name)
                continue
            if message.kind == "request":
                answer = await on_server_request(message.raw)
                if answer is not None:
                    await session.respond(answer, headers=headers)
            elif message.kind == "notification":
                await on_notification(message.raw)
    except (TimeoutError, aiohttp.ClientError):
        return


async def _known_to_be_alive(session: UpstreamSession, headers: Mapping[str, str] | None) -> None:
    """After a GET answered 404: the session is forgotten, or the server has no GET route and
    answers 404 for a live session. A `ping` on it tells (docs/decisions.md §69): its 404 raises
    `SessionLost` (the session marked lost); any answer, even an error, shows the session alive.
    Raises `McpError` (HTTP 502) when the backend cannot be reached."""
    try:
        await session.request("ping", headers=headers)
    except McpError as exc:
        if exc.http_status is not None:
            raise


async def refuse_server_request(message: dict[str, Any]) -> dict[str, Any]:
    """Default answer to a server→client request: `ping` → `{}`; anything else → -32601, so the
    backend is never left waiting (docs/behaviour.md §4.8 "Other server→client requests")."""
    if message.get("method") == "ping":
        return jsonrpc.result_response(message.get("id"), {})
    error = McpError(METHOD_NOT_FOUND, f"{message.get('method')} is not available through this proxy for this request")
    return jsonrpc.error_response(message.get("id"), error)
