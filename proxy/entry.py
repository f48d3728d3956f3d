"""Every HTTP request to the MCP endpoint, once (docs/behaviour.md §2, §6): parse, work out the
client's dialect, route (`proxy.routing`), call the pairing (`proxy.pairings.PAIRINGS`), and map
errors to HTTP in one place.

    POST ─► size, Content-Type, JSON-RPC ─► dialect ─┬─ v2-modern: Accept, _meta and header checks,
                                                     │   route ─► relay, or pairing.answer ─► JSON
                                                     └─ session wire: the proxy's own session, a
                                                         relayed one, or an initialize placed anew
    GET / DELETE ─► the proxy's own session, a relayed session, else 404 / 405
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from translators import jsonrpc
from translators.dialect import is_modern, session_dialect
from translators.envelope import ModernMeta, check_headers, read_meta
from translators.errors import HEADER_MISMATCH, INTERNAL_ERROR, INVALID_REQUEST, McpError, modern_http_status
from translators.failures import PROXY, PROXY_ERROR, Failure
from translators.oauth import AuthChallenge
from translators.protocol import H_SESSION_ID
from translators.sealing import Keyring

from .config import Settings
from .faces.challenge import challenge_answer
from .faces.checks import (
    ANSWERED,
    accepts_json,
    caller_headers,
    json_response,
    not_modern_error,
    read_body,
    refuse_ambiguous_caller,
    refuse_conflicting_duplicates,
    relay_outcome,
)
from .faces.modern import AnswerStream, ModernRequest, write_reply
from .faces.session import KEEPALIVE_S, SessionFace
from .fleet import Fleet, FleetMember
from .metrics import method_label, outcome_of
from .observe.failures import COUNTED, UNCOUNTED, of_refusal, of_relayed, repairs_of
from .observe.hooks import TRACE
from .observe.recorder import CANCELLED, UNCLASSIFIED, UNKNOWN_CLIENT, ClientKey, client_key, default_failure
from .pairings import Relay
from .routing import Router
from .shadow import held_body, written
from .state.health import StoreTrouble
from .upstream.backend import UnsupportedBackend
from .upstream.endpoint import BackendUnreachable, reconnect_wait

log = logging.getLogger(__name__)


class Entry:
    """The MCP endpoint: `post`, and `get_or_delete`."""

    def __init__(self, settings: Settings, keyring: Keyring, fleet: Fleet, sessions: SessionFace, tracing: Any = None):
        self.settings = settings
        self.keyring = keyring
        self.fleet = fleet
        self.router = Router(fleet, keyring, shared_store=settings.store.startswith("redis://"))
        self.sessions = sessions
        self._identity_header = settings.identity_header_name
        self._caller_headers = caller_headers(self._identity_header)
        """Headers that must not come twice with different values (`refuse_ambiguous_caller`)."""
        self._reconnect_wait_s = settings.reconnect_wait_ms / 1000
        self.tracing = tracing
        """`proxy.observe.tracing.Tracing` when traces are on, else None."""
        self._keepalive_s = min(KEEPALIVE_S, settings.idle_timeout_ms / 2000)
        """Seconds between keep-alive comments on a streamed answer (docs/decisions.md §41)."""
        self.shadow: Any = None
        """`proxy.shadow.Shadowing` (set by the application): answers offered to shadow backends."""

    async def post(self, request: web.Request) -> web.StreamResponse:
        """Every POST, inside a server span when traces are on (`proxy/observe/tracing.py`)."""
        if self.tracing is None:
            return await self._post(request)
        trace = self.tracing.request(request.headers)
        token = TRACE.set(trace)
        status = None
        try:
            response = await self._post(request)
            status = response.status
            return response
        finally:
            trace.end(status)
            TRACE.reset(token)

    async def _post(self, request: web.Request) -> web.StreamResponse:
        """Every POST: parse it, work out its dialect and its backend, and answer. New work that
        finds its backend unreachable goes to the next one; nothing was sent to the first."""
        principal: str | None = None  # worked out where needed: a relayed session's POST does not
        request_id: Any = None
        method: str | None = None
        face = UNCLASSIFIED  # until the request is read as modern or as a session's
        client = UNKNOWN_CLIENT
        repairs: tuple[str, ...] = ()
        member = self.fleet.first
        try:
            body = await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout_ms / 1000)
            message = jsonrpc.parse(body)
            request_id = message.id if message.kind == "request" else None
            method = message.method
            refuse_ambiguous_caller(request, self._caller_headers)
            params = message.params
            if self.tracing is not None:
                TRACE.get().begin(method, params, request_id)
            if not is_modern(method, params):
                session_id = request.headers.get(H_SESSION_ID)
                if session_id is not None or method == "initialize":
                    face = "v1"
                    # A session is bound to its backend; with one backend, so is everything.
                    bound = session_id is not None or not self.fleet.multi
                    with reconnect_wait(self._reconnect_wait_s if bound else 0.0):
                        return await self._session_wire(request, message, body, session_id)
                raise not_modern_error(message, request)
            face = "v2-modern"
            principal = self.keyring.principal(request.headers.get(self._identity_header))
            if not accepts_json(request.headers.get("Accept")):
                raise McpError(INVALID_REQUEST, "Not Acceptable: the Accept header must allow application/json", http_status=406)
            meta = read_meta(params)
            client = client_key(meta.client_info)
            refuse_conflicting_duplicates(request)
            check_headers(message.method, params, meta, request.headers)
            repairs = repairs_of(message.method, params, request.headers)
            member, bound = await self.router.modern(message, meta, principal)
            tried: set[str] = set()
            while True:
                work = member.work if bound else None  # a draining backend's bound work (docs/decisions.md §84)
                if work is not None:
                    work.begin()
                try:
                    with reconnect_wait(self._reconnect_wait_s if bound else 0.0):
                        return await self._modern(member, request, body, message, meta, principal, client, repairs)
                except BackendUnreachable:
                    tried.add(member.name)
                    if bound or len(tried) >= len(self.fleet.members):
                        raise
                    member = await self.fleet.pick(frozenset(tried))
                finally:
                    if work is not None:
                        work.end()
        except McpError as exc:
            reason = self._log_refusal(exc, principal or self._principal(request), request)
            if not request.get(COUNTED):
                _count(member, method, outcome_of(exc), face, client, reason=reason, failure=of_refusal(exc, method), repairs=repairs)
            answer_id = request_id if request_id is not None else exc.request_id
            if isinstance(exc, AuthChallenge):  # the backend's status and challenge, on every face (decision 80)
                return challenge_answer(exc, answer_id, self.settings, request)
            return json_response(jsonrpc.error_response(answer_id, exc), modern_http_status(exc))
        except UnsupportedBackend as exc:
            _count(member, method, str(INTERNAL_ERROR), face, client, reason="backend of an unsupported dialect",
                   failure=(PROXY_ERROR, PROXY), repairs=repairs)
            error = McpError(INTERNAL_ERROR, str(exc), http_status=502)
            return json_response(jsonrpc.error_response(request_id, error), 502)
        except Exception:  # a proxy bug must not take the connection down without an answer
            log.exception("internal error answering a request from principal=%s", principal or self._principal(request))
            _count(member, method, str(INTERNAL_ERROR), face, client, reason="internal error in mcp-tasks-proxy",
                   failure=(PROXY_ERROR, PROXY), repairs=repairs)
            error = McpError(INTERNAL_ERROR, "Internal error in mcp-tasks-proxy")
            return json_response(jsonrpc.error_response(request_id, error), 500)

    async def _modern(self, member: FleetMember, request: web.Request, body: bytes, message: jsonrpc.Message, meta: ModernMeta,
                      principal: str, client: ClientKey, repairs: tuple[str, ...] = ()) -> web.StreamResponse:
        """A checked modern request, answered by `member`'s pairing for its backend's dialect."""
        # The dialect decides relay or translation: probe first when it is not known yet (a
        # backend that was down at start), so a v2 backend is never translated as v1.
        profile = member.backend.fresh() or await member.backend.current(_credentials(request))
        pairing = member.pairing("v2-modern", profile.dialect)
        if isinstance(pairing, Relay):
            try:
                response = await pairing.modern(request, body, message, principal)
            except asyncio.CancelledError:  # the client left before the stream's end: "cancelled" unless it had its answer
                _count(member, message.method, "ok" if request.get(ANSWERED) else CANCELLED, client=client, repairs=repairs)
                if self.shadow is not None and self.shadow.wants(member.name, message.method):
                    self._offer_gone(member, request, message, principal)
                raise
            outcome = relay_outcome(response)
            _count(member, message.method, outcome, client=client, repairs=repairs,
                   failure=None if outcome == "ok" else of_relayed(response, message.method, session_wire=False))
            if self.shadow is not None and self.shadow.wants(member.name, message.method):
                await self._shadow(member, request, response, message, principal, held_body(response), follow=False)
            return response
        if message.kind == "notification":
            _count(member, message.method, "ok", client=client, repairs=repairs)
            return web.Response(status=202)
        if message.kind == "response":
            raise McpError(INVALID_REQUEST, "The 2026-07-28 wire has no server requests to answer")
        forward = self.settings.upstream_headers(request.headers)
        out = AnswerStream(request, self._keepalive_s)
        if out.gone and message.method == "subscriptions/listen":  # decision 66: nothing it could receive
            raise McpError(INVALID_REQUEST, "Not Acceptable: subscriptions/listen is answered as text/event-stream", http_status=406)
        call = ModernRequest(message.method, message.params, meta, principal, forward, out.notify, message.id)
        try:
            reply = await pairing.answer(call)  # type: ignore[union-attr]
        except asyncio.CancelledError:
            out.close()
            raise
        except Exception as exc:
            if not out.started:
                raise
            # Notifications went out as SSE: the error is the stream's last event (HTTP 200).
            error = exc if isinstance(exc, McpError) else McpError(INTERNAL_ERROR, "Internal error in mcp-tasks-proxy")
            if not isinstance(exc, McpError):
                log.exception("internal error answering a streamed request from principal=%s", principal)
            else:
                self._log_refusal(exc, principal, request)
            _count(member, message.method, outcome_of(error), client=client, reason=error.message,
                   failure=of_refusal(error, message.method), repairs=repairs)
            return await out.finish(jsonrpc.error_response(message.id, error))
        _count(member, message.method, "ok", client=client, repairs=repairs)
        if self.tracing is not None:
            TRACE.get().result(reply.result)
        response = await write_reply(out, message.id, reply)
        if self.shadow is not None and self.shadow.wants(member.name, message.method):
            await self._shadow(member, request, response, message, principal, reply.result)
        return response

    def _offer_gone(self, member: FleetMember, request: web.Request, message: jsonrpc.Message, principal: str | None = None) -> None:
        """Offer a relayed request whose client left before the backend's stream ended (it may have
        read its answer, and can no longer be slowed): the primary is asked again (`proxy/shadow.py`)."""
        self.shadow.offer(member, message.method, message.params, principal or self._principal(request),
                          self.settings.upstream_headers(request.headers), None)

    async def _shadow_own_session(self, session_id: str, request: web.Request, response: web.StreamResponse,
                                  message: jsonrpc.Message) -> None:
        """Offer an answer of one of the proxy's own sessions to its backend's shadows; the primary
        is asked again (the answer is in the session's dialect, its ids sealed for the session)."""
        session = self.sessions.sessions.held(session_id)
        member = self.fleet.get(session.rules.backend.name) if session is not None else None
        if member is not None and self.shadow.wants(member.name, message.method):
            await self._shadow(member, request, response, message, self._principal(request), None)

    async def _shadow(self, member: FleetMember, request: web.Request, response: web.StreamResponse, message: jsonrpc.Message,
                      principal: str, answer: Any, *, follow: bool = True) -> None:
        """Offer an answer to `member`'s shadow backends once the client has it (`proxy/shadow.py`)."""
        if not await written(request, response):
            return
        self.shadow.offer(member, message.method, message.params, principal, self.settings.upstream_headers(request.headers),
                          answer, follow=follow)

    async def _session_wire(self, request: web.Request, message: jsonrpc.Message, body: bytes,
                            session_id: str | None) -> web.StreamResponse:
        """A session-wire POST (docs/behaviour.md §2 rules 3–5): the proxy's own session, a relayed
        session (routed by the backend sealed in its id), or an `initialize` the router places."""
        if session_id is not None:
            owned = self.sessions.owns_now(session_id)  # no await in the common cases
            if owned or (owned is None and await self.sessions.owns(session_id)):
                response = await self._own_session(request, message)  # counted by the session face
                if message.kind == "request" and self.shadow is not None and self.shadow.wants_any(message.method):
                    await self._shadow_own_session(session_id, request, response, message)
                return response
            routed = self.router.relayed_session(session_id, lambda: self._principal(request))
            if routed is not None:
                member, upstream_id = routed
                dialect = (member.backend.fresh() or await member.backend.current(_credentials(request))).dialect
                if upstream_id is not None or dialect in ("v1", "v2-session"):
                    return await self._relay_session(member, request, body, message, upstream_id)
            return await self._own_session(request, message)  # 404: no such session
        client = session_dialect(message.params)
        tried: set[str] = set()
        while True:
            member = await self.fleet.pick(frozenset(tried), session=True)
            try:
                dialect = (await member.backend.current(_credentials(request))).dialect  # decides relay or translation
                break
            except BackendUnreachable:
                tried.add(member.name)
                if len(tried) >= len(self.fleet.members):
                    raise
        if client == dialect:
            return await self._relay_session(member, request, body, message, None)
        if member.backend.challenge is not None and not request.headers.get("Authorization"):
            raise member.backend.challenge  # a protected backend: challenged before a session (decision 80)
        return await self._own_session(request, message, member.pairing(client, dialect))

    async def _own_session(self, request: web.Request, message: jsonrpc.Message, pairing: Any = None) -> web.StreamResponse:
        """A POST of the proxy's own session wire (`SessionFace.handle_post`, which counts it); one
        it could not count (no session: "Session not found") is counted here, on the first backend
        (the one every request is counted on before it is routed), as the proxy's refusal."""
        response = await self.sessions.handle_post(request, message, pairing)
        uncounted = request.get(UNCOUNTED)
        if uncounted is not None:
            face, outcome, failure = uncounted
            _count(self.fleet.first, message.method, outcome, face, failure=failure)
        return response

    async def _relay_session(self, member: FleetMember, request: web.Request, body: bytes, message: jsonrpc.Message,
                             upstream_id: str | None) -> web.StreamResponse:
        relay = member.relay
        backend = member.backend
        recorder = backend.metrics.recorder
        # Relayed: the client speaks the dialect the backend spoke at its initialize, v1 or
        # v2-session; a session from before an in-place upgrade is counted under that relay still.
        dialect = "v2-session" if backend.dialect == "v2-session" else "v1"
        initialize = message.method == "initialize"
        client = client_key(message.params.get("clientInfo")) if initialize else recorder.session_client(request.headers.get(H_SESSION_ID))
        if client is UNKNOWN_CLIENT and not initialize and backend.metrics.lasting is not None and H_SESSION_ID in request.headers:
            # Begun before a restart, or on another worker or replica: the store may know its client.
            client = await backend.metrics.lasting.session_client(request.headers[H_SESSION_ID])
        if member.held.on and upstream_id is not None:  # held tasks of a v1 client (docs/behaviour.md §9)
            held = await member.held_sessions.intercept(request, message, upstream_id)
            if held is not None:  # answered by the proxy: the session is in use all the same (decision 140)
                backend.connector.session_used(upstream_id)
                if H_SESSION_ID in request.headers:
                    member.work.session_used(request.headers[H_SESSION_ID])
                _count(member, message.method, relay_outcome(held), "v1", client, dialect, backend_dialect=dialect)
                return held
        try:
            body = relay.session_body(message, body, upstream_id)
        except McpError as exc:  # a task id not sealed for this session: never sent upstream
            _count(member, message.method, outcome_of(exc), "v1", client, dialect, exc.message, failure=of_refusal(exc, message.method),
                   backend_dialect=dialect)
            return json_response(jsonrpc.error_response(message.id if message.kind == "request" else None, exc), 200)
        work = member.work
        remember = None
        if initialize:
            lasting = backend.metrics.lasting

            def remember(session_id: str) -> None:
                recorder.remember_session(session_id, client=client)
                work.session_seen(session_id)
                if lasting is not None:
                    lasting.session_begun(session_id, client)
        session_id = request.headers.get(H_SESSION_ID)
        counted = session_id is not None and work.session_began(session_id)
        work.begin()
        try:
            response = await relay.session(request, body, message, upstream_id, remember)
        except asyncio.CancelledError:  # the client left before the stream's end: "cancelled" unless it had its answer
            _count(member, message.method, "ok" if request.get(ANSWERED) else CANCELLED, "v1", client, dialect, backend_dialect=dialect)
            if message.kind == "request" and self.shadow is not None and self.shadow.wants(member.name, message.method):
                self._offer_gone(member, request, message)
            raise
        except McpError as exc:  # counted here, under the session's backend and client; answered by `_post`
            _count(member, message.method, outcome_of(exc), "v1", client, dialect, exc.message, failure=of_refusal(exc, message.method),
                   backend_dialect=dialect)
            request[COUNTED] = True
            raise
        finally:
            work.end()
            if counted:
                work.session_done(session_id)  # idle from its end, as the stdio pool counts it (decision 140)
        if session_id is not None and response.status == 404:
            work.session_ended(session_id)
        outcome = relay_outcome(response)
        _count(member, message.method, outcome, "v1", client, dialect, backend_dialect=dialect,
               failure=None if outcome == "ok" else of_relayed(response, message.method, session_wire=True))
        if message.kind == "request" and self.shadow is not None and self.shadow.wants(member.name, message.method):
            await self._shadow(member, request, response, message, self._principal(request), None)  # asked again: v1-shaped ids
        return response

    async def get_or_delete(self, request: web.Request) -> web.StreamResponse:
        """GET and DELETE: the proxy's own sessions, relayed sessions (routed like their POSTs), else
        404 for a session id and 405 without one (the modern wire has neither)."""
        try:
            refuse_ambiguous_caller(request, self._caller_headers)
        except McpError as exc:
            return json_response(jsonrpc.error_response(None, exc), 400)
        session_id = request.headers.get(H_SESSION_ID)
        if session_id is None:
            error = McpError(INVALID_REQUEST, f"Method Not Allowed: the 2026-07-28 wire has no {request.method}")
            return json_response(jsonrpc.error_response(None, error), 405, {"Allow": "POST"})
        if not await self.sessions.owns(session_id):
            routed = self.router.relayed_session(session_id, lambda: self._principal(request))
            if routed is not None:
                member, upstream_id = routed
                profile = member.backend.profile
                if upstream_id is not None or (profile is not None and profile.dialect in ("v1", "v2-session")):
                    counted = member.work.session_began(session_id)
                    member.work.begin()  # a GET stream is bound work too (docs/decisions.md §84)
                    try:
                        response = await member.relay.session(request, None, None, upstream_id)
                    except AuthChallenge as exc:  # decision 80
                        return challenge_answer(exc, None, self.settings, request)
                    finally:
                        member.work.end()
                        if counted:
                            member.work.session_done(session_id)  # a stream's session is idle from its end (decision 140)
                    if response.status == 404 or (request.method == "DELETE" and response.status < 300):
                        member.work.session_ended(session_id)
                    return response
        if request.method == "GET":
            return await self.sessions.handle_get(request)
        return await self.sessions.handle_delete(request)

    def _principal(self, request: web.Request) -> str:
        return self.keyring.principal(request.headers.get(self._identity_header))

    def _log_refusal(self, exc: McpError, principal: str, request: web.Request) -> str:
        """Log a refusal; returns its reason as logs and the status page may show it."""
        if isinstance(exc, StoreTrouble):  # the store logged it going away (or refusing), once (decision 76)
            log.debug("task state store unreachable for principal=%s: %s", principal, exc.message)
            return exc.message
        if isinstance(exc, BackendUnreachable):  # the backend logged it going down, once
            log.info("backend unreachable for principal=%s: %s", principal, exc.message)
            return exc.message
        if exc.http_status == 502:
            log.warning("backend failure for principal=%s: %s", principal, exc.message)
            return exc.message
        # A header mismatch's message quotes the header; header values are never logged.
        reason = "a header does not match the request body" if exc.code == HEADER_MISMATCH else exc.message
        log.info("refused request from principal=%s peer=%s: %d %s", principal, request.remote, exc.code, reason)
        return reason


def _credentials(request: web.Request) -> dict[str, str] | None:
    """The client's `Authorization` as a one-entry dict (None without one): what a protected
    backend's dialect may be learnt with (docs/decisions.md §82)."""
    authorization = request.headers.get("Authorization")
    return {"Authorization": authorization} if authorization else None


def _count(member: FleetMember, method: str | None, outcome: str, face: str = "v2-modern", client: ClientKey = UNKNOWN_CLIENT,
           dialect: str | None = None, reason: str | None = None, *, failure: Failure | None = None,
           repairs: tuple[str, ...] = (), backend_dialect: str | None = None) -> None:
    """One answered request in `mcp_tasks_proxy_requests_total` and on the status page (the
    client's dialect is `dialect`, else `face`; the backend's is `backend_dialect`, else what it
    speaks now; `reason` of a refusal, free of header values; `failure` its reason code and by
    whom, `translators.failures`; `repairs` what the proxy made good for it)."""
    backend = member.backend
    metrics = backend.metrics
    backend_dialect = backend_dialect or backend.dialect
    client_dialect = dialect or face
    metrics.request(face, backend_dialect, method, outcome)
    if outcome != "ok" and outcome != CANCELLED:  # a client that left is no failure
        failure = failure or default_failure(outcome, reason, method)
        metrics.failure(backend.name, client_dialect, backend_dialect, failure)
    metrics.recorder.request(backend.name, client_dialect, backend_dialect, outcome, client,
                             None if outcome == "ok" else method_label(method), reason, failure=failure, repairs=repairs)
    if repairs:
        metrics.repaired(client_dialect, repairs)
    trace = TRACE.get()
    if trace is not None:
        trace.answered(backend.name, dialect or face, backend_dialect, outcome)
