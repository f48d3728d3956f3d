"""The session face: the proxy's own Streamable HTTP sessions (2025-11-25) for v1 clients (docs/behaviour.md §2, §5).

`initialize` is answered with a sealed `Mcp-Session-Id`. Answers are JSON, or SSE when the proxy must first put requests
to the client (a task's input, an MRTR round), which it answers with POSTed responses. One GET stream per session carries
what the pairing pushes (behaviour.md §5.7–§5.9), with `Last-Event-ID` replay from a bounded buffer (`replay.py`); DELETE ends the
session. Sessions are kept in the `TaskStateStore` too: with SQLite one survives a restart, its pending requests and
replay buffer do not (decisions.md, "State that survives a restart"). Source: core 2025-11-25 §Transports; docs/wire.md §5.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from aiohttp import web
from cachetools import LRUCache

from translators import jsonrpc
from translators.dialect import session_dialect
from translators.errors import INTERNAL_ERROR, INVALID_REQUEST, McpError, for_v1_client, session_not_found
from translators.oauth import AuthChallenge
from translators.protocol import H_LAST_EVENT_ID, H_SESSION_ID, LEGACY_VERSION
from translators.sealing import Keyring
from translators.tool_results import TOOL_METHODS, of_result

from ..config import Settings
from ..sse import sse_frame
from ..state.health import StoreTrouble
from ..state.store import SessionRecord, TaskStateStore
from .call import OWN_SESSION, REFUSAL, SEEN, Call, Outcome, client_key
from .challenge import challenge_answer
from .checks import session_outcome, stream_to, version_refusal
from .replay import ReplayBuffer

OUTCOME = web.RequestKey("mcp_tasks_proxy_outcome", str)  # the outcome label `SessionReply.finish` leaves for the counter

log = logging.getLogger(__name__)

JSON = "application/json"
SSE = "text/event-stream"
SUPPORTED_LEGACY_VERSIONS = (LEGACY_VERSION, "2025-06-18", "2025-03-26")
ASK_TIMEOUT_S = 600.0  # longest the proxy waits for a v1 client to answer a request it put to it
KEEPALIVE_S = 15.0  # longest time between keep-alive comments on a quiet GET stream
_request_ids = itertools.count(1)
_PROCESS = secrets.token_hex(4)  # part of the ids of requests put to clients: unique across processes sharing a store
ANSWERS = "answers"
"""The channel on which a client's response reaching one process goes to the one that asked."""


class SessionPairing(Protocol):
    """What a session's requests mean: the pairing of its dialect in front of the backend the
    router gave it at `initialize` (`proxy.pairings.V1OverV2`, `proxy.pairings.V2SessionCarriage`)."""

    backend: Any
    """The backend it answers for (`proxy.upstream.backend.Backend`: `name`, `dialect`, `metrics`)."""

    async def initialize_result(self, params: dict[str, Any]) -> dict[str, Any]: ...

    async def dispatch(self, session: ProxySession, method: str, params: dict[str, Any], reply: SessionReply,
                       request: web.Request) -> dict[str, Any]: ...


class ProxySession:
    """One v1 client session: who it is, what it declared, its GET stream and pending requests."""

    def __init__(self, opened: SessionRecord, replay_events: int, rules: SessionPairing | None = None):
        """The session `opened` describes (its id, principal, face, `initialize` params and protocol
        version), its requests answered by `rules`, with `replay_events` events kept for `Last-Event-ID`."""
        self.id = opened.session_id
        self.principal = opened.principal
        self.face = opened.face
        """"v1", or "v2-session" when the client declared the tasks extension in `initialize`."""
        self.rules = rules
        """What the session's requests mean: the rules of its face in front of the backend the
        router gave it at `initialize` (`V1OverV2` or `V2SessionRules`); every request goes there."""
        params = opened.params
        capabilities = params.get("capabilities")
        self.client_capabilities: dict[str, Any] = capabilities if isinstance(capabilities, dict) else {}
        info = params.get("clientInfo")
        self.client_info: dict[str, Any] | None = info if isinstance(info, dict) else None
        self.protocol_version = opened.protocol_version
        self.last_seen = time.monotonic()
        self.pending: dict[jsonrpc.RequestId, asyncio.Future[dict[str, Any]]] = {}
        self.get_stream: web.StreamResponse | None = None
        self._get_transport: asyncio.BaseTransport | None = None
        self._get_ended: asyncio.Event | None = None
        self.events = ReplayBuffer(replay_events)
        self._event_ids = itertools.count(1)
        self.saved_at = 0.0
        """When the session was last written to the store (wall clock, seconds)."""
        self.state: dict[str, Any] = {}
        """What the pairing keeps of the session, in the store with it (a v1 client's log level, its resource subscriptions)."""

    def record(self) -> SessionRecord:
        """What the store keeps of this session."""
        assert self.rules is not None
        params = {"capabilities": self.client_capabilities, "clientInfo": self.client_info, "state": self.state}
        return SessionRecord(self.id, self.principal, self.face, self.rules.backend.name, params, self.protocol_version)

    @classmethod
    def restored(cls, record: SessionRecord, replay_events: int, rules: SessionPairing) -> ProxySession:
        """A session from the store (the proxy restarted). Its event ids continue above any it
        issued before: they start at the current time in milliseconds, so a client's
        `Last-Event-ID` from before the restart never hides a new event."""
        session = cls(record, replay_events, rules)
        session._event_ids = itertools.count(int(time.time() * 1000))
        session.state = dict(record.params.get("state") or {})
        return session

    def open_get_stream(self, stream: web.StreamResponse, transport: asyncio.BaseTransport | None) -> asyncio.Event:
        """Make `stream` the session's GET stream; the event returned is set when it must end
        (replaced by a newer one, or the session deleted)."""
        self.end_get_stream()
        self.get_stream, self._get_transport = stream, transport
        self._get_ended = asyncio.Event()
        return self._get_ended

    def end_get_stream(self) -> None:
        """Let go of the GET stream (its handler returns at once)."""
        if self._get_ended is not None:
            self._get_ended.set()
        self.get_stream, self._get_transport, self._get_ended = None, None, None

    def get_stream_gone(self) -> bool:
        """Whether the GET stream's connection is closed or closing (the client went away)."""
        transport = self._get_transport
        return transport is None or transport.is_closing()

    def event_id(self) -> int:
        """A new event id, unique across all of this session's streams."""
        return next(self._event_ids)

    async def notify(self, message: dict[str, Any]) -> None:
        """Send a notification on the GET stream (kept for `Last-Event-ID` replay) if one is open."""
        event_id = self.event_id()
        frame = sse_frame(event_id, message)
        self.events.append(event_id, frame)
        stream = self.get_stream
        if stream is not None:
            try:
                await stream.write(frame)
            except (ConnectionError, RuntimeError):
                if self.get_stream is stream:
                    self.end_get_stream()

    def answer(self, message: Mapping[str, Any]) -> bool:
        """Deliver the client's JSON-RPC response to a request the proxy put to it."""
        future = self.pending.get(message.get("id"))  # type: ignore[arg-type]
        if future is None or future.done():
            return False
        future.set_result(dict(message))
        return True


class SessionReply:
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
            await stream_to(self.request, self.stream)
        return self.stream

    async def send(self, message: dict[str, Any]) -> None:
        """Send a request or notification to the client on this POST's stream."""
        stream = await self._open()
        await stream.write(sse_frame(self.session.event_id(), message))

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Put a request to the client and wait for its JSON-RPC response (result or error object).

        Raises `McpError` when the client does not accept SSE or does not answer in time.
        """
        request_id = f"mcp-tasks-proxy-{_PROCESS}-{next(_request_ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.session.pending[request_id] = future
        try:
            await self.send(jsonrpc.request(request_id, method, params))
            return await asyncio.wait_for(future, ASK_TIMEOUT_S)
        except TimeoutError:
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


TOUCH_S = 60.0
"""A session in use is written to the store again (idle time renewed) at most this often (or every tenth of `session_idle_ms`)."""


class SessionStore:
    """Live proxy sessions, bounded in count and idle time, each also kept in `store`; a session
    this process does not hold (it restarted) is `restore`d from the store (None: not servable)."""

    def __init__(self, *, max_sessions: int, idle_ms: int, store: TaskStateStore | None = None,
                 restore: Callable[[SessionRecord], ProxySession | None] | None = None):
        self.max_sessions = max_sessions
        self.idle_s = idle_ms / 1000
        self.store = store
        self.restore = restore
        self._touch_s = min(TOUCH_S, self.idle_s / 10)
        self._sessions: dict[str, ProxySession] = {}
        self._absent: LRUCache[str, bool] = LRUCache(max_sessions)  # ids the store lacked (relayed sessions' ids)

    async def add(self, session: ProxySession) -> None:
        self._absent.pop(session.id, None)
        await self._hold(session)
        await self._save(session)

    async def _hold(self, session: ProxySession) -> None:
        self._sweep()
        if len(self._sessions) >= self.max_sessions:
            oldest = min(self._sessions.values(), key=lambda s: s.last_seen)
            await self.remove(oldest.id)
        self._sessions[session.id] = session

    async def _save(self, session: ProxySession) -> None:
        if self.store is not None:
            session.saved_at = time.time()
            await self.store.keep_session(session.record(), self.idle_s)

    async def get(self, session_id: str, principal: str) -> ProxySession | None:
        """The live session with this id opened by this principal (another principal's: None).
        With a shared store the session's idle time is the store's (another process may have
        served it meanwhile) and a session ended by another process is let go here too."""
        session = await self.peek(session_id)
        if session is None or session.principal != principal:
            return None
        shared = self.store is not None and self.store.shared
        if not shared and time.monotonic() - session.last_seen > self.idle_s:
            await self.remove(session_id)
            return None
        session.last_seen = time.monotonic()
        if self.store is not None and time.time() - session.saved_at > self._touch_s:
            if shared and await self.store.session(session_id) is None:
                self._sessions.pop(session_id, None)  # ended (or expired) in the store
                return None
            await self._save(session)
        return session

    async def remove(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
        if self.store is not None:
            await self.store.forget_session(session_id)

    async def peek(self, session_id: str) -> ProxySession | None:
        """The session with this id, whoever owns it, without touching its idle time."""
        session = self._sessions.get(session_id)
        if session is None and session_id and self.store is not None and self.restore is not None and session_id not in self._absent:
            record = await self.store.session(session_id)
            session = self.restore(record) if record is not None else None
            if session is None:
                self._absent[session_id] = True  # asked once: a relayed session's requests cost no store read
            else:
                session.saved_at = time.time()
                await self._hold(session)
        return session

    def held(self, session_id: str) -> ProxySession | None:
        """The session if this process holds it now (no store read)."""
        return self._sessions.get(session_id)

    def known(self, session_id: str) -> bool | None:
        """Held here (True), known not to be a session (False: no store, or the store lacked it), or None: ask `peek`."""
        if session_id in self._sessions:
            return True
        return False if self.store is None or self.restore is None or session_id in self._absent else None

    def __len__(self) -> int:
        return len(self._sessions)

    def count_for(self, backend: str) -> int:
        """Live sessions held here whose backend is `backend` (docs/decisions.md §84: a draining backend's work)."""
        self._sweep()
        return sum(1 for session in self._sessions.values() if session.rules.backend.name == backend)

    def _sweep(self) -> None:
        now = time.monotonic()
        for sid in [s.id for s in self._sessions.values() if now - s.last_seen > self.idle_s]:
            self._sessions.pop(sid, None)


class SessionFace:
    """HTTP handling of the session wire; what requests mean is each session's `rules`, the pairing the entry chose at
    `initialize` (`proxy/entry.py`). `rules_for(backend name, dialect)` gives a restored session's (None: not configured)."""

    def __init__(self, settings: Settings, keyring: Keyring, store: TaskStateStore | None = None, *,
                 rules_for: Callable[[str, str], SessionPairing | None] | None = None):
        self.settings = settings
        self.keyring = keyring
        self.rules_for = rules_for
        self.store = store
        self.sessions = SessionStore(max_sessions=settings.max_sessions, idle_ms=settings.session_idle_ms, store=store,
                                     restore=self._restore)
        self._identity_header = settings.identity_header_name
        self._closing = asyncio.Event()
        self.keepalive_s = min(KEEPALIVE_S, settings.idle_timeout_ms / 2000)
        """Seconds between keep-alive comments on a quiet GET stream: at most half `idle_timeout_ms`
        (docs/decisions.md §41)."""

    def _restore(self, record: SessionRecord) -> ProxySession | None:
        rules = self.rules_for(record.backend, record.face) if self.rules_for is not None else None
        return ProxySession.restored(record, self.settings.replay_events, rules) if rules is not None else None

    async def deliver_answer(self, payload: dict[str, Any]) -> None:
        """A client's response another process received (`ANSWERS`): to the session here that asked."""
        session = self.sessions.held(str(payload.get("session")))
        message = payload.get("message")
        if session is not None and isinstance(message, dict):
            session.answer(message)

    def close_streams(self) -> None:
        """End every session's GET stream (the proxy is stopping; clients reconnect elsewhere)."""
        self._closing.set()

    def owns_now(self, session_id: str) -> bool | None:
        """Whether `session_id` is a live session of this proxy (any principal); None: ask `owns` (a store read)."""
        return self.sessions.known(session_id)

    async def owns(self, session_id: str) -> bool:
        """Whether `session_id` is a live session of this proxy (any principal)."""
        known = self.sessions.known(session_id)
        return known if known is not None else await self.sessions.peek(session_id) is not None

    def principal(self, request: web.Request) -> str:
        return self.keyring.principal(request.headers.get(self._identity_header))

    async def handle_post(self, call: Call, pairing: SessionPairing | None = None) -> tuple[web.StreamResponse, Outcome]:
        """A parsed session-wire POST, answered; what it came to is returned for the entry's observer,
        and the call learns its face, its client and its session's backend (left as it is without
        a session). `pairing` is the one the entry chose for an `initialize`."""
        request, message = call.request, call.message
        assert message is not None
        response = await self._handle_post(request, message, pairing)
        session = await self.sessions.peek(request.headers.get(H_SESSION_ID) or response.headers.get(H_SESSION_ID, ""))
        rules = session.rules if session is not None else pairing
        if rules is not None:  # else no session: counted on the backend the call has, the fleet's first
            call.backend = rules.backend
            call.client = client_key(session.client_info if session is not None else message.params.get("clientInfo"))
        call.face = await self._face_of(request, message)
        label = session_outcome(request.get(OUTCOME), response)
        return response, Outcome.ok(OWN_SESSION) if label == "ok" else Outcome(label, answer=response, source=OWN_SESSION)

    async def _face_of(self, request: web.Request, message: jsonrpc.Message) -> str:
        """The face label of a session-wire request: "v1", or "v2-session" for such sessions."""
        session = await self.sessions.peek(request.headers.get(H_SESSION_ID, ""))
        if session is not None:
            return getattr(session, "face", "v1")
        return session_dialect(message.params) if message.method == "initialize" else "v1"

    async def _handle_post(self, request: web.Request, message: jsonrpc.Message, pairing: SessionPairing | None) -> web.StreamResponse:
        """A parsed session-wire POST (docs/behaviour.md §2 rules 3–5)."""
        principal = self.principal(request)
        session_id = request.headers.get(H_SESSION_ID)
        if session_id is None:
            if message.kind == "request" and message.method == "initialize" and pairing is not None:
                return await self._initialize(request, message, principal, pairing)
            return _error(message.id if message.kind == "request" else None,
                          McpError(INVALID_REQUEST, "Bad Request: Missing session ID"), 400)
        session = await self.sessions.get(session_id, principal)
        if session is None:
            return _error(message.id if message.kind == "request" else None, session_not_found(), 404)
        refusal = version_refusal(request, session.protocol_version, message.id if message.kind == "request" else None)
        if refusal is not None:
            log.info("refused %s from principal=%s: MCP-Protocol-Version header is not the session's", message.method or message.kind,
                     principal)
            return refusal
        if message.kind == "response":
            if not session.answer(message.raw) and self.store is not None and self.store.shared:
                # Asked by another process sharing the store: its listener delivers it.
                await self.store.publish(ANSWERS, {"session": session.id, "message": message.raw})  # type: ignore[attr-defined]
            return web.Response(status=202)
        if message.kind == "notification":
            return web.Response(status=202)
        if message.method == "initialize":
            return _error(message.id, McpError(INVALID_REQUEST, "Session already initialized"), 400)
        reply = SessionReply(request, session)
        v2 = session.face == "v2-session"
        try:
            result = await session.rules.dispatch(session, message.method, message.params, reply, request)
        except McpError as exc:
            request[REFUSAL] = exc
            error = exc if v2 else for_v1_client(exc)
            log.log(logging.DEBUG if isinstance(exc, StoreTrouble) else logging.INFO,  # decision 76: logged once by the store
                    "refused %s from principal=%s: %d %s", message.method, principal, error.code, error.message)
            if isinstance(exc, AuthChallenge) and reply.stream is None:  # the backend's challenge (decision 80)
                return challenge_answer(exc, message.id, self.settings, request)
            return await reply.finish(jsonrpc.error_response(message.id, error))
        if message.method in TOOL_METHODS:
            request[SEEN] = of_result(message.method, result, v1=not v2)
        return await reply.finish(jsonrpc.result_response(message.id, result))

    async def _initialize(self, request: web.Request, message: jsonrpc.Message, principal: str, handler: SessionPairing) -> web.StreamResponse:
        params = message.params
        face = session_dialect(params)
        try:
            result = await handler.initialize_result(params)
        except AuthChallenge as exc:  # the backend's challenge (decision 80)
            return challenge_answer(exc, message.id, self.settings, request)
        except McpError as exc:
            return _error(message.id, for_v1_client(exc) if face == "v1" else exc, exc.http_status or 200)
        requested = params.get("protocolVersion")
        version = requested if requested in SUPPORTED_LEGACY_VERSIONS else LEGACY_VERSION
        session_id = self.keyring.seal("session", (secrets.token_urlsafe(12),), principal)
        opened = SessionRecord(session_id, principal, face, handler.backend.name, params, version)
        await self.sessions.add(ProxySession(opened, self.settings.replay_events, handler))
        body = jsonrpc.result_response(message.id, {**result, "protocolVersion": version})
        return web.Response(body=jsonrpc.dumps(body), content_type=JSON, headers={H_SESSION_ID: session_id})

    async def handle_get(self, request: web.Request) -> web.StreamResponse:
        """The session's standalone SSE stream (one per session: a second gets 409)."""
        session = await self.sessions.get(request.headers[H_SESSION_ID], self.principal(request))
        if session is None:
            return _error(None, session_not_found(), 404)
        refusal = version_refusal(request, session.protocol_version, None)
        if refusal is not None:
            return refusal
        if SSE not in request.headers.get("Accept", SSE):
            return _error(None, McpError(INVALID_REQUEST, "Not Acceptable: the GET stream is text/event-stream"), 406)
        last = request.headers.get(H_LAST_EVENT_ID)
        # A client resuming with Last-Event-ID, or whose stream's connection is already closed,
        # takes the session's stream over at once: its old stream dropped, though the proxy may
        # not have noticed yet (MCP 2025-11-25, Streamable HTTP: resumability; docs/decisions.md §35).
        if session.get_stream is not None and last is None and not session.get_stream_gone():
            return _error(None, McpError(INVALID_REQUEST, "Conflict: Only one SSE stream is allowed per session"), 409)
        stream = web.StreamResponse(status=200, headers={"Content-Type": SSE, "Cache-Control": "no-cache",
                                                         "X-Accel-Buffering": "no", H_SESSION_ID: session.id})
        await stream.prepare(request)
        ended = session.open_get_stream(stream, request.transport)
        if (opened := getattr(session.rules, "get_stream_opened", None)) is not None:
            opened(session, request, ended)  # the pairing may push what it follows there until `ended` (behaviour.md §5.7, §5.9)
        try:
            if last is not None and last.isdigit():
                for frame in session.events.after(int(last)):
                    await stream.write(frame)
            while not ended.is_set() and await self.sessions.get(session.id, session.principal) is session:
                if await self._ends_within(ended, self.keepalive_s):
                    break  # replaced, deleted, or the proxy is stopping (shutdown need not wait for it)
                await stream.write(b": keep-alive\n\n")
            if ended.is_set() and request.transport is not None and await self.sessions.get(session.id, session.principal) is session:
                request.transport.close()  # taken over by a resumed stream: this connection may be dead
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if session.get_stream is stream:
                session.end_get_stream()
        return stream

    async def _ends_within(self, ended: asyncio.Event, seconds: float) -> bool:
        """Whether `ended` is set or the proxy starts stopping within `seconds`."""
        waits = [asyncio.ensure_future(ended.wait()), asyncio.ensure_future(self._closing.wait())]
        try:
            done, _ = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return bool(done)

    async def handle_delete(self, request: web.Request) -> web.Response:
        session = await self.sessions.get(request.headers[H_SESSION_ID], self.principal(request))
        if session is None:
            return _error(None, session_not_found(), 404)
        refusal = version_refusal(request, session.protocol_version, None)
        if refusal is not None:
            return refusal
        await self.sessions.remove(session.id)
        session.end_get_stream()
        return web.Response(status=200)


def _error(request_id: Any, error: McpError, status: int) -> web.Response:
    return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(request_id, error)), status=status, content_type=JSON)
