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
import contextlib
import functools
import logging
from collections.abc import Awaitable
from typing import Any

from aiohttp import web

from translators import jsonrpc
from translators.dialect import is_modern, session_dialect
from translators.envelope import check_headers, read_meta
from translators.errors import HEADER_MISMATCH, INTERNAL_ERROR, INVALID_REQUEST, McpError, backend_removed, modern_http_status
from translators.failures import PROXY, PROXY_ERROR
from translators.oauth import AuthChallenge
from translators.protocol import H_SESSION_ID
from translators.sealing import Keyring

from .config import Settings
from .faces.call import (
    CANCELLED,
    OK,
    OWN_SESSION,
    RELAYED,
    RELAYED_SESSION,
    TRANSLATED,
    UNKNOWN_CLIENT,
    Call,
    Outcome,
    client_key,
)
from .faces.challenge import challenge_answer
from .faces.checks import (
    ANSWERED,
    STREAMING,
    accepts_json,
    caller_headers,
    json_response,
    not_modern_error,
    read_body,
    refuse_ambiguous_caller,
    refuse_conflicting_duplicates,
    whole_body,
)
from .faces.modern import AnswerStream, ModernRequest, write_reply
from .faces.session import KEEPALIVE_S, SessionFace
from .fleet import Fleet, FleetMember
from .metrics import outcome_of
from .observe.failures import of_refusal, repairs_of
from .observe.hooks import TRACE
from .observe.outcome import record
from .overload import RETRY_AFTER_S, LoopLag, starts_work
from .pairings import Relay
from .pairings.forward import NEW_SESSION, UpstreamSession
from .routing import Route, Router
from .shadow.mirror import held_body, written
from .sse import unnumbered_frame
from .state.health import StoreTrouble
from .upstream.backend import UnsupportedBackend
from .upstream.endpoint import BackendUnreachable, reconnect_wait
from .work import removed_backend

log = logging.getLogger(__name__)


class Entry:
    """The MCP endpoint: `post`, and `get_or_delete`."""

    def __init__(self, settings: Settings, keyring: Keyring, fleet: Fleet, sessions: SessionFace, tracing: Any = None):
        self.settings = settings
        self.keyring = keyring
        self.fleet = fleet
        self.router = Router(fleet, keyring, shared_store=settings.store.startswith("redis://"),
                             reconnect_wait_s=settings.reconnect_wait_ms / 1000)
        self.sessions = sessions
        self._identity_header = settings.identity_header_name
        self._caller_headers = caller_headers(self._identity_header)
        """Headers that must not come twice with different values (`refuse_ambiguous_caller`)."""
        self.tracing = tracing
        """`proxy.observe.tracing.Tracing` when traces are on, else None."""
        self._keepalive_s = min(KEEPALIVE_S, settings.idle_timeout_ms / 2000)
        """Seconds between keep-alive comments on a streamed answer (docs/decisions.md §41)."""
        self.shadow: Any = None
        """`proxy.shadow.mirror.Shadowing` (set by the application): answers offered to shadow backends."""
        self.overload = LoopLag(settings.overload_lag_ms)
        """Whether this process sheds new work (`proxy/overload.py`; the application runs its `watch`)."""

    def post(self, request: web.Request) -> Awaitable[web.StreamResponse]:
        """Every POST, inside a server span when traces are on (`proxy/observe/tracing.py`). (A
        plain function handing back the coroutine that answers it: one coroutine less a request.)"""
        if self.tracing is None:
            return self._post(request)
        return self._traced(request, self.tracing)

    async def _traced(self, request: web.Request, tracing: Any) -> web.StreamResponse:
        trace = tracing.request(request.headers)
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
        """Every POST: read and checked once into a `Call`, its dialect and its route worked out,
        answered, and its outcome recorded once (`proxy.observe.outcome.record`), then offered to
        shadow backends; a refusal or a proxy bug is answered and recorded here, on the backend
        the call had reached (the fleet's first before it is routed)."""
        call = Call(request, self.fleet.first.backend)
        try:
            body = whole_body(request, self.settings.max_body_bytes)  # arrived with the head: no coroutine
            call.body = body if body is not None else await read_body(request, self.settings.max_body_bytes,
                                                                      self.settings.body_timeout_ms / 1000)
            message = call.message = jsonrpc.parse(call.body)
            refuse_ambiguous_caller(request, self._caller_headers)
            params = message.params
            if self.tracing is not None:
                TRACE.get().begin(message.method, params, message.id if message.kind == "request" else None)
            modern = is_modern(message.method, params)
            session_id = None if modern else request.headers.get(H_SESSION_ID)
            if not modern and session_id is None and message.method != "initialize":
                raise not_modern_error(message, request)
            call.face = "v2-modern" if modern else "v1"
            if self.overload.shedding and starts_work(message.method, message.kind):
                raise self.overload.refusal()  # before any routing: shedding costs as little as it can
            if not modern:
                # A session is bound to its backend; with one backend, so is everything.
                bound = session_id is not None or not self.fleet.multi
                with reconnect_wait(self.router.reconnect_wait_s if bound else 0.0):
                    response, outcome = await self._session_wire(call, session_id)
            else:
                if not accepts_json(request.headers.get("Accept")):
                    raise McpError(INVALID_REQUEST, "Not Acceptable: the Accept header must allow application/json", http_status=406)
                meta = call.meta = read_meta(params)
                call.client = client_key(meta.client_info)
                refuse_conflicting_duplicates(request)
                check_headers(message.method, params, meta, request.headers)
                call.repairs = repairs_of(message.method, params, request.headers)
                principal = call.principal = self._principal(request)
                route = self.router.modern(message, meta, principal) or await self.router.new_work()
                response, outcome = await self.router.drive(route, functools.partial(self._modern, call))
        except asyncio.CancelledError as exc:
            removed = removed_backend(exc)
            if removed is None or not _uncancelled():
                # the client left: a relay under way counts it, "cancelled" unless it had its answer
                if call.relaying:
                    self._record(call, Outcome("ok" if request.get(ANSWERED) else CANCELLED))
                    if self._shadowed(call):
                        self._offer(call, None, True)
                raise
            # its backend was removed by a reload while it was in flight (decision 165): answered now
            error = backend_removed(removed)
            outcome = Outcome(outcome_of(error), of_refusal(error, call.method), error.message)
            response = await _removed_answer(request, jsonrpc.error_response(_request_id(call), error))
        except McpError as exc:
            reason = self._log_refusal(exc, self._caller(call), request)
            message = call.message
            answer_id = message.id if message is not None and message.kind == "request" else exc.request_id
            outcome = Outcome(outcome_of(exc), of_refusal(exc, call.method), reason)
            if isinstance(exc, AuthChallenge):  # the backend's status and challenge, on every face (decision 80)
                response = challenge_answer(exc, answer_id, self.settings, request)
            else:
                response = json_response(jsonrpc.error_response(answer_id, exc), modern_http_status(exc))
                if response.status == 503 and not exc.by_backend:  # a bound of the proxy's own: when to come back
                    response.headers["Retry-After"] = str(RETRY_AFTER_S)
        except UnsupportedBackend as exc:
            outcome = Outcome(str(INTERNAL_ERROR), (PROXY_ERROR, PROXY), "backend of an unsupported dialect")
            response = json_response(jsonrpc.error_response(_request_id(call), McpError(INTERNAL_ERROR, str(exc), http_status=502)), 502)
        except Exception:  # a proxy bug must not take the connection down without an answer
            log.exception("internal error answering a request from principal=%s", self._caller(call))
            outcome = Outcome(str(INTERNAL_ERROR), (PROXY_ERROR, PROXY), "internal error in mcp-tasks-proxy")
            error = McpError(INTERNAL_ERROR, "Internal error in mcp-tasks-proxy")
            response = json_response(jsonrpc.error_response(_request_id(call), error), 500)
        self._record(call, outcome)
        if outcome.source is not None and self._shadowed(call):
            await self._offer_answered(call, response, outcome)
        return response

    async def _modern(self, call: Call, route: Route) -> tuple[web.StreamResponse, Outcome]:
        """A checked modern request, answered by the route's pairing for its backend's dialect."""
        member = route.member
        call.backend = member.backend
        request, message = call.request, call.message
        assert message is not None and call.meta is not None
        # The dialect decides relay or translation: probe first when it is not known yet (a
        # backend that was down at start), so a v2 backend is never translated as v1.
        profile = member.backend.fresh() or await member.backend.current(_credentials(request))
        pairing = member.pairing("v2-modern", profile.dialect)
        if isinstance(pairing, Relay):
            call.relaying = True
            try:
                response = await pairing.modern(call)
            except Exception:  # not relayed after all (e.g. unreachable: the next backend may translate it)
                call.relaying = False
                raise
            call.relaying = False
            return response, Outcome.relayed(response, RELAYED)
        if message.kind == "notification":
            return web.Response(status=202), OK
        if message.kind == "response":
            raise McpError(INVALID_REQUEST, "The 2026-07-28 wire has no server requests to answer")
        out = AnswerStream(request, self._keepalive_s)
        if out.gone and message.method == "subscriptions/listen":  # decision 66: nothing it could receive
            raise McpError(INVALID_REQUEST, "Not Acceptable: subscriptions/listen is answered as text/event-stream", http_status=406)
        modern = ModernRequest(message.method, message.params, call.meta, call.principal,
                               self.settings.upstream_headers(request.headers)).streamed(out.notify, message.id)
        try:
            reply = await pairing.answer(modern)  # type: ignore[union-attr]
        except asyncio.CancelledError:
            out.close()
            raise
        except Exception as exc:
            if not out.started:
                raise
            # Notifications went out as SSE: the error is the stream's last event (HTTP 200).
            error = exc if isinstance(exc, McpError) else McpError(INTERNAL_ERROR, "Internal error in mcp-tasks-proxy")
            if not isinstance(exc, McpError):
                log.exception("internal error answering a streamed request from principal=%s", call.principal)
            else:
                self._log_refusal(exc, call.principal, request)
            outcome = Outcome(outcome_of(error), of_refusal(error, message.method), error.message)
            self._record(call, outcome)  # before it is written: a client that leaves while it is, had it
            return await out.finish(jsonrpc.error_response(message.id, error)), outcome
        outcome = Outcome("ok", source=TRANSLATED, answer=reply.result)
        self._record(call, outcome)  # before it is written: the trace links a created task before the client can ask for it
        return await write_reply(out, message.id, reply), outcome

    def _shadowed(self, call: Call) -> bool:
        """Whether the call's answer may be offered to its backend's shadows (before any parsing)."""
        shadow = self.shadow
        message = call.message
        return shadow is not None and message is not None and message.kind == "request" and shadow.wants(call.backend.name, message.method)

    async def _offer_answered(self, call: Call, response: web.StreamResponse, outcome: Outcome) -> None:
        """Offer an answer to the shadows of the backend that gave it, once the client has it
        (`proxy/shadow/mirror.py`): a modern relay's body as it was sent, a translation's result, and
        otherwise nothing (the primary is asked again: a session's ids belong to the session)."""
        source = outcome.source
        if source == OWN_SESSION and self.sessions.sessions.held(call.session_id or "") is None:
            return  # no such session: nothing was answered for a backend
        if not await written(call.request, response):
            return
        if source == RELAYED:
            self._offer(call, held_body(response), False)
        else:
            self._offer(call, outcome.answer if source == TRANSLATED else None, True)

    def _offer(self, call: Call, answer: Any, follow: bool) -> None:
        member = self.fleet.get(call.backend.name)
        if member is not None:
            message = call.message
            assert message is not None
            self.shadow.offer(member, message.method, message.params, self._caller(call),
                              self.settings.upstream_headers(call.request.headers), answer, follow=follow)

    async def _session_wire(self, call: Call, session_id: str | None) -> tuple[web.StreamResponse, Outcome]:
        """A session-wire POST (docs/behaviour.md §2 rules 3–5): the proxy's own session, a relayed
        session (routed by the backend sealed in its id), or an `initialize` the router places."""
        request, message = call.request, call.message
        assert message is not None
        if session_id is not None:
            owned = self.sessions.owns_now(session_id)  # no await in the common cases
            if owned or (owned is None and await self.sessions.owns(session_id)):
                return await self.sessions.handle_post(call)
            routed = self.router.relayed_session(session_id, lambda: self._caller(call))
            if routed is not None:
                member, upstream = routed
                dialect = (member.backend.fresh() or await member.backend.current(_credentials(request))).dialect
                if upstream.id is not None or dialect in ("v1", "v2-session"):
                    return await self._relay_session(call, member, upstream)
            return await self.sessions.handle_post(call)  # 404: no such session
        client = session_dialect(message.params)
        credentials = _credentials(request)

        async def probe(route: Route) -> tuple[FleetMember, Any]:  # decides relay or translation
            return route.member, (await route.member.backend.current(credentials)).dialect

        member, dialect = await self.router.drive(Route(await self.fleet.pick(session=True), False), probe, session=True)
        if client == dialect:
            return await self._relay_session(call, member, NEW_SESSION)
        if member.backend.challenge is not None and not request.headers.get("Authorization"):
            raise member.backend.challenge  # a protected backend: challenged before a session (decision 80)
        return await self.sessions.handle_post(call, member.pairing(client, dialect))  # type: ignore[arg-type]

    async def _relay_session(self, call: Call, member: FleetMember, upstream: UpstreamSession) -> tuple[web.StreamResponse, Outcome]:
        """A relayed session's POST, counted under `member` and the session's client: the client
        speaks the dialect the backend spoke at its initialize, v1 or v2-session; a session from
        before an in-place upgrade is counted under that relay still."""
        request, message = call.request, call.message
        assert message is not None
        relay = member.relay
        backend = call.backend = member.backend
        recorder = backend.metrics.recorder
        call.dialect = call.backend_dialect = "v2-session" if backend.dialect == "v2-session" else "v1"
        initialize = message.method == "initialize"
        session_id = request.headers.get(H_SESSION_ID)
        client = call.client = client_key(message.params.get("clientInfo")) if initialize else recorder.session_client(session_id)
        if client is UNKNOWN_CLIENT and not initialize and backend.metrics.lasting is not None and session_id is not None:
            # Begun before a restart, or on another worker or replica: the store may know its client.
            client = call.client = await backend.metrics.lasting.session_client(session_id)
        upstream_id = upstream.id
        if member.held.on and upstream_id is not None:  # held tasks of a v1 client (docs/behaviour.md §9)
            answering = member.held_sessions.intercept(request, message, upstream_id)
            held = await answering if answering is not None else None
            if held is not None:  # answered by the proxy: the session is in use all the same (decision 140)
                backend.connector.session_used(upstream_id)
                if session_id is not None:
                    member.work.session_used(session_id)
                return held, Outcome.of_status(held.status)
        try:
            body = relay.session_body(message, call.body, upstream)
        except McpError as exc:  # a task id not sealed for this session: never sent upstream
            answer = json_response(jsonrpc.error_response(message.id if message.kind == "request" else None, exc), 200)
            return answer, Outcome(outcome_of(exc), of_refusal(exc, message.method), exc.message)
        work = member.work
        remember = None
        if initialize:
            lasting = backend.metrics.lasting

            def remember(session_id: str) -> None:
                recorder.remember_session(session_id, client=client)
                work.session_seen(session_id)
                if lasting is not None:
                    lasting.session_begun(session_id, client)
        counted = session_id is not None and work.session_began(session_id)
        work.begin()
        call.relaying = True
        try:
            response = await relay.session(request, body, message, upstream, remember)
        finally:
            work.end()
            if counted:
                work.session_done(session_id)  # type: ignore[arg-type]  # idle from its end, as the stdio pool counts it (decision 140)
        call.relaying = False
        if session_id is not None and response.status == 404:
            work.session_ended(session_id)
        return response, Outcome.relayed(response, RELAYED_SESSION)

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
                member, upstream = routed
                profile = member.backend.profile
                if upstream.id is not None or (profile is not None and profile.dialect in ("v1", "v2-session")):
                    counted = member.work.session_began(session_id)
                    member.work.begin()  # a GET stream is bound work too (docs/decisions.md §84)
                    try:
                        response = await member.relay.session(request, None, None, upstream)
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

    def _record(self, call: Call, outcome: Outcome) -> None:
        """Hand the call's outcome to the observer (`proxy.observe.outcome.record`), once."""
        if not call.recorded:
            call.recorded = True
            record(call, outcome)

    def _principal(self, request: web.Request) -> str:
        return self.keyring.principal(request.headers.get(self._identity_header))

    def _caller(self, call: Call) -> str:
        """The call's principal, worked out once."""
        principal = call.principal
        if principal is None:
            principal = call.principal = self._principal(call.request)
        return principal

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


async def _removed_answer(request: web.Request, answer: dict[str, Any]) -> web.StreamResponse:
    """`answer` (an error naming a removed backend) as JSON with HTTP 502, or as the last event of
    the SSE answer already under way (its status was sent)."""
    stream = request.get(STREAMING)
    if stream is None:
        return json_response(answer, 502)
    with contextlib.suppress(ConnectionError, RuntimeError):  # the client may have gone too
        await stream.write(unnumbered_frame(answer))
        await stream.write_eof()
    return stream


def _uncancelled() -> bool:
    """Take back the one cancellation of this handler (a backend's removal, answered instead);
    False when another is pending (its client left too)."""
    task = asyncio.current_task()
    return task is not None and task.uncancel() == 0


def _request_id(call: Call) -> Any:
    """The id an answer to the call carries: its request's, else none."""
    message = call.message
    return message.id if message is not None and message.kind == "request" else None
