"""The session face: the proxy's own Streamable HTTP sessions (2025-11-25) for v1 clients.

`initialize` is answered by the proxy with a sealed `Mcp-Session-Id`; later requests carry it.
Answers are JSON, or SSE when the proxy must first put requests to the client (input for a task
or an MRTR round): the client answers them with POSTed JSON-RPC responses. One GET stream per
session carries `notifications/tasks/status`, with `Last-Event-ID` replay from a bounded buffer;
DELETE ends the session. Source: core 2025-11-25 §Transports; WIRE.md §5; TRANSLATION.md §2, §5.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import secrets
import time
from typing import Any, Mapping

from aiohttp import web

from translators import jsonrpc
from translators.errors import INTERNAL_ERROR, INVALID_REQUEST, McpError, for_v1_client
from translators.protocol import H_LAST_EVENT_ID, H_PROTOCOL_VERSION, H_SESSION_ID, LEGACY_VERSION, TASKS_EXTENSION
from translators.sealing import Keyring

from ..config import Settings

OUTCOME = web.RequestKey("mcp_tasks_proxy_outcome", str)
"""Where `PostReply.finish` leaves the outcome label of its answer for the request counter."""

log = logging.getLogger(__name__)

JSON = "application/json"
SSE = "text/event-stream"
SUPPORTED_LEGACY_VERSIONS = (LEGACY_VERSION, "2025-06-18", "2025-03-26")
ASK_TIMEOUT_S = 600.0
"""Longest the proxy waits for a v1 client to answer a request it put to it."""
KEEPALIVE_S = 15.0
"""Longest time between keep-alive comments on a quiet GET stream."""
_request_ids = itertools.count(1)


class ProxySession:
    """One v1 client session: who it is, what it declared, its GET stream and pending requests."""

    def __init__(self, session_id: str, principal: str, params: Mapping[str, Any], protocol_version: str, replay_events: int,
                 face: str = "v1", rules: Any = None):
        self.id = session_id
        self.principal = principal
        self.face = face
        """"v1", or "v2-session" when the client declared the tasks extension in `initialize`."""
        self.rules = rules
        """What the session's requests mean: the rules of its face in front of the backend the
        router gave it at `initialize` (`V1OverV2` or `V2SessionRules`); every request goes there."""
        capabilities = params.get("capabilities")
        self.client_capabilities: dict[str, Any] = capabilities if isinstance(capabilities, dict) else {}
        info = params.get("clientInfo")
        self.client_info: dict[str, Any] | None = info if isinstance(info, dict) else None
        self.protocol_version = protocol_version
        self.last_seen = time.monotonic()
        self.pending: dict[jsonrpc.RequestId, asyncio.Future[dict[str, Any]]] = {}
        self.get_stream: web.StreamResponse | None = None
        self.events: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=replay_events)
        self._event_ids = itertools.count(1)

    def event_id(self) -> int:
        """A new event id, unique across all of this session's streams."""
        return next(self._event_ids)

    async def notify(self, message: dict[str, Any]) -> None:
        """Send a notification on the GET stream (kept for `Last-Event-ID` replay) if one is open."""
        event_id = self.event_id()
        frame = sse_frame(event_id, message)
        self.events.append((event_id, frame))
        stream = self.get_stream
        if stream is not None:
            try:
                await stream.write(frame)
            except (ConnectionError, RuntimeError):
                self.get_stream = None

    def answer(self, message: Mapping[str, Any]) -> bool:
        """Deliver the client's JSON-RPC response to a request the proxy put to it."""
        future = self.pending.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or future.done():
            return False
        future.set_result(dict(message))
        return True


def sse_frame(event_id: int, message: dict[str, Any]) -> bytes:
    """One SSE event carrying a JSON-RPC message."""
    return b"id: %d\nevent: message\ndata: " % event_id + jsonrpc.dumps(message) + b"\n\n"


class PostReply:
    """The answer to one POST: JSON unless something must be sent first, then SSE."""

    def __init__(self, request: web.Request, session: ProxySession):
        self.request = request
        self.session = session
        self.stream: web.StreamResponse | None = None
        accept = request.headers.get("Accept", "")
        self.can_stream = SSE in accept or "*/*" in accept

    async def _open(self) -> web.StreamResponse:
        if self.stream is None:
            if not self.can_stream:
                raise McpError(INVALID_REQUEST, "This answer needs a server-sent event stream: send Accept: text/event-stream")
            self.stream = web.StreamResponse(status=200, headers={
                "Content-Type": SSE, "Cache-Control": "no-cache", "X-Accel-Buffering": "no", H_SESSION_ID: self.session.id})
            await self.stream.prepare(self.request)
        return self.stream

    async def send(self, message: dict[str, Any]) -> None:
        """Send a request or notification to the client on this POST's stream."""
        stream = await self._open()
        await stream.write(sse_frame(self.session.event_id(), message))

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Put a request to the client and wait for its JSON-RPC response (result or error object).

        Raises `McpError` when the client does not accept SSE or does not answer in time.
        """
        request_id = f"mcp-tasks-proxy-{next(_request_ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.session.pending[request_id] = future
        try:
            await self.send(jsonrpc.request(request_id, method, params))
            return await asyncio.wait_for(future, ASK_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise McpError(INTERNAL_ERROR, f"The client did not answer {method} in time") from None
        finally:
            self.session.pending.pop(request_id, None)

    async def finish(self, message: dict[str, Any], status: int = 200) -> web.StreamResponse:
        error = message.get("error")
        self.request[OUTCOME] = str(error.get("code")) if isinstance(error, dict) else "ok"
        if self.stream is not None:
            await self.stream.write(sse_frame(self.session.event_id(), message))
            await self.stream.write_eof()
            return self.stream
        return web.Response(body=jsonrpc.dumps(message), status=status, content_type=JSON, headers={H_SESSION_ID: self.session.id})


class SessionStore:
    """Live proxy sessions, bounded in count and idle time."""

    def __init__(self, *, max_sessions: int, idle_ms: int):
        self.max_sessions = max_sessions
        self.idle_s = idle_ms / 1000
        self._sessions: dict[str, ProxySession] = {}

    def add(self, session: ProxySession) -> None:
        self._sweep()
        if len(self._sessions) >= self.max_sessions:
            oldest = min(self._sessions.values(), key=lambda s: s.last_seen)
            self._sessions.pop(oldest.id, None)
        self._sessions[session.id] = session

    def get(self, session_id: str, principal: str) -> ProxySession | None:
        """The live session with this id opened by this principal (another principal's: None)."""
        session = self._sessions.get(session_id)
        if session is None or session.principal != principal:
            return None
        if time.monotonic() - session.last_seen > self.idle_s:
            self._sessions.pop(session_id, None)
            return None
        session.last_seen = time.monotonic()
        return session

    def remove(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def peek(self, session_id: str) -> ProxySession | None:
        """The session with this id, whoever owns it, without touching its idle time."""
        return self._sessions.get(session_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def _sweep(self) -> None:
        now = time.monotonic()
        for sid in [s.id for s in self._sessions.values() if now - s.last_seen > self.idle_s]:
            self._sessions.pop(sid, None)


class SessionFace:
    """HTTP handling of the session wire; what requests mean is each session's `rules`, chosen at
    `initialize` from the stack (`proxy.fleet.Stack`) the router picked."""

    def __init__(self, settings: Settings, keyring: Keyring):
        self.settings = settings
        self.keyring = keyring
        self.sessions = SessionStore(max_sessions=settings.max_sessions, idle_ms=settings.session_idle_ms)
        self._identity_header = settings.identity_header or "Authorization"
        self._closing = asyncio.Event()
        self.keepalive_s = min(KEEPALIVE_S, settings.idle_timeout_ms / 2000)
        """Seconds between keep-alive comments on a quiet GET stream: at most half `idle_timeout_ms`
        (docs/decisions.md §33)."""

    def close_streams(self) -> None:
        """End every session's GET stream (the proxy is stopping; clients reconnect elsewhere)."""
        self._closing.set()

    def owns(self, session_id: str) -> bool:
        """Whether `session_id` is a live session of this proxy (any principal)."""
        return session_id in self.sessions

    def principal(self, request: web.Request) -> str:
        return self.keyring.principal(request.headers.get(self._identity_header))

    async def handle_post(self, request: web.Request, message: jsonrpc.Message, stack: Any = None) -> web.StreamResponse:
        """A parsed session-wire POST, answered and counted in `mcp_tasks_proxy_requests_total`.
        `stack` is the backend's (`proxy.fleet.Stack`) for an `initialize`."""
        response = await self._handle_post(request, message, stack)
        session = self.sessions.peek(request.headers.get(H_SESSION_ID) or response.headers.get(H_SESSION_ID, ""))
        backend = session.rules.backend if session is not None else getattr(stack, "backend", None)
        if backend is not None:
            backend.metrics.request(self._face_of(request, message), backend.dialect, message.method, _outcome(request, response))
        return response

    def _face_of(self, request: web.Request, message: jsonrpc.Message) -> str:
        """The face label of a session-wire request: "v1", or "v2-session" for such sessions."""
        session = self.sessions.peek(request.headers.get(H_SESSION_ID, ""))
        if session is not None:
            return getattr(session, "face", "v1")
        capabilities = message.params.get("capabilities") if message.method == "initialize" else None
        extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
        return "v2-session" if isinstance(extensions, dict) and TASKS_EXTENSION in extensions else "v1"

    async def _handle_post(self, request: web.Request, message: jsonrpc.Message, stack: Any) -> web.StreamResponse:
        """A parsed session-wire POST (TRANSLATION.md §2 rules 3–5)."""
        principal = self.principal(request)
        session_id = request.headers.get(H_SESSION_ID)
        if session_id is None:
            if message.kind == "request" and message.method == "initialize" and stack is not None:
                return await self._initialize(request, message, principal, stack)
            return _error(message.id if message.kind == "request" else None,
                          McpError(INVALID_REQUEST, "Bad Request: Missing session ID"), 400)
        session = self.sessions.get(session_id, principal)
        if session is None:
            return _error(message.id if message.kind == "request" else None, McpError(INVALID_REQUEST, "Session not found"), 404)
        refusal = _version_refusal(request, session, message.id if message.kind == "request" else None)
        if refusal is not None:
            log.info("refused %s from principal=%s: MCP-Protocol-Version header is not the session's", message.method or message.kind,
                     principal)
            return refusal
        if message.kind == "response":
            session.answer(message.raw)
            return web.Response(status=202)
        if message.kind == "notification":
            return web.Response(status=202)
        if message.method == "initialize":
            return _error(message.id, McpError(INVALID_REQUEST, "Session already initialized"), 400)
        reply = PostReply(request, session)
        v2 = session.face == "v2-session"
        try:
            result = await session.rules.dispatch(session, message.method, message.params, reply, request)
        except McpError as exc:
            error = exc if v2 else for_v1_client(exc)
            log.info("refused %s from principal=%s: %d %s", message.method, principal, error.code, error.message)
            return await reply.finish(jsonrpc.error_response(message.id, error))
        return await reply.finish(jsonrpc.result_response(message.id, result))

    async def _initialize(self, request: web.Request, message: jsonrpc.Message, principal: str, stack: Any) -> web.StreamResponse:
        params = message.params
        capabilities = params.get("capabilities")
        extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
        face = "v2-session" if isinstance(extensions, dict) and TASKS_EXTENSION in extensions else "v1"
        handler = stack.v2_rules if face == "v2-session" else stack.v1_rules
        try:
            result = await handler.initialize_result(params)
        except McpError as exc:
            return _error(message.id, for_v1_client(exc) if face == "v1" else exc, exc.http_status or 200)
        requested = params.get("protocolVersion")
        version = requested if requested in SUPPORTED_LEGACY_VERSIONS else LEGACY_VERSION
        session_id = self.keyring.seal("session", (secrets.token_urlsafe(12),), principal)
        self.sessions.add(ProxySession(session_id, principal, params, version, self.settings.replay_events, face, handler))
        body = jsonrpc.result_response(message.id, {**result, "protocolVersion": version})
        return web.Response(body=jsonrpc.dumps(body), content_type=JSON, headers={H_SESSION_ID: session_id})

    async def handle_get(self, request: web.Request) -> web.StreamResponse:
        """The session's standalone SSE stream (one per session: a second gets 409)."""
        session = self.sessions.get(request.headers[H_SESSION_ID], self.principal(request))
        if session is None:
            return _error(None, McpError(INVALID_REQUEST, "Session not found"), 404)
        refusal = _version_refusal(request, session, None)
        if refusal is not None:
            return refusal
        if SSE not in request.headers.get("Accept", SSE):
            return _error(None, McpError(INVALID_REQUEST, "Not Acceptable: the GET stream is text/event-stream"), 406)
        if session.get_stream is not None:
            return _error(None, McpError(INVALID_REQUEST, "Conflict: Only one SSE stream is allowed per session"), 409)
        stream = web.StreamResponse(status=200, headers={"Content-Type": SSE, "Cache-Control": "no-cache",
                                                         "X-Accel-Buffering": "no", H_SESSION_ID: session.id})
        await stream.prepare(request)
        session.get_stream = stream
        try:
            last = request.headers.get(H_LAST_EVENT_ID)
            if last is not None and last.isdigit():
                for event_id, frame in list(session.events):
                    if event_id > int(last):
                        await stream.write(frame)
            while session.get_stream is stream and self.sessions.get(session.id, session.principal) is session:
                try:
                    await asyncio.wait_for(self._closing.wait(), self.keepalive_s)
                    break  # the proxy is stopping: end the stream so shutdown need not wait for it
                except asyncio.TimeoutError:
                    await stream.write(b": keep-alive\n\n")
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if session.get_stream is stream:
                session.get_stream = None
        return stream

    async def handle_delete(self, request: web.Request) -> web.Response:
        session = self.sessions.get(request.headers[H_SESSION_ID], self.principal(request))
        if session is None:
            return _error(None, McpError(INVALID_REQUEST, "Session not found"), 404)
        refusal = _version_refusal(request, session, None)
        if refusal is not None:
            return refusal
        self.sessions.remove(session.id)
        session.get_stream = None
        return web.Response(status=200)


def _outcome(request: web.Request, response: web.StreamResponse) -> str:
    """The outcome label of a session-wire answer: set by `PostReply.finish`, else read from the
    small JSON body every other answer is (an `_error`, an `InitializeResult`, or 202)."""
    outcome = request.get(OUTCOME)
    if outcome is not None:
        return outcome
    if response.status == 202 or not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return "ok" if response.status < 300 else f"http_{response.status}"
    try:
        error = json.loads(response.body).get("error")
    except (ValueError, AttributeError):
        error = None
    return str(error.get("code")) if isinstance(error, dict) else "ok"


def _version_refusal(request: web.Request, session: ProxySession, request_id: Any) -> web.Response | None:
    """HTTP 400 for a request of an initialized session whose `MCP-Protocol-Version` header is
    not the version negotiated at `initialize` (MCP 2025-11-25, Streamable HTTP: "invalid or
    unsupported MCP-Protocol-Version" → 400 Bad Request); None when it is, or when the header is
    absent (the negotiated version is assumed: docs/decisions.md §34). The header's value is
    neither logged nor echoed."""
    versions = request.headers.getall(H_PROTOCOL_VERSION, ())
    if all(version == session.protocol_version for version in versions):
        return None
    error = McpError(INVALID_REQUEST, f"Bad Request: Unsupported protocol version in the MCP-Protocol-Version header "
                                      f"(this session uses {session.protocol_version})")
    return _error(request_id, error, 400)


def _error(request_id: Any, error: McpError, status: int) -> web.Response:
    return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(request_id, error)), status=status, content_type=JSON)
