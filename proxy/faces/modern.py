"""The v2-modern face: `POST /mcp` on the stateless 2026-07-28 wire, in front of a v1 backend.

Data flow: HTTP request → transport checks (size, Content-Type) → JSON-RPC parse → dialect of the
request (docs/behaviour.md §2) → envelope and header checks → method dispatch → upstream session
(`translators` reshape every message) → JSON answer with the HTTP status of §6.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING, Any, Mapping

from aiohttp import web

from translators import jsonrpc
from translators.capabilities import server_capabilities_to_v2, tool_to_v2
from translators.differences import (
    created_task_from_v2,
    cancel_answer_v2,
    created_task_result_v2,
    created_task_to_v2,
    drop_task_param,
    get_task_result_v2,
    inline_result_type,
    task_param_v1,
    update_ack_v2,
)
from translators.envelope import (
    ModernMeta,
    encode_header_value,
    name_param,
    check_headers,
    complete_result,
    is_modern,
    read_meta,
    strip_envelope,
    upstream_client_capabilities,
    with_server_info,
)
from translators.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    McpError,
    missing_tasks_extension,
    modern_http_status,
)
from translators.inputs import input_required_result, read_input_responses, strip_mrtr
from translators.policy import creation_decision
from translators.protocol import (
    H_METHOD,
    H_NAME,
    H_SESSION_ID,
    MODERN_VERSION,
    MRTR_METHODS,
    REMOVED_MODERN_METHODS,
    TASKS_EXTENSION,
    REMOVED_TASK_METHODS_V2,
    TASK_METHODS_V2,
)
from translators.fleet_ids import ids_to_backend, ids_to_client, listened_task_ids
from translators.sealing import Keyring, TaskRef

from ..upstream.backend import Backend, UnsupportedBackend
from ..config import Settings
from ..pairings.mrtr import Exchange, ExchangeBook
from .checks import (
    accepts_json,
    json_response,
    not_modern_error,
    read_body,
    refuse_conflicting_duplicates,
    relay_outcome,
)
from ..metrics import outcome_of
from ..pairings.relay import relay
from ..upstream.v2_session_wire import session_capabilities
from ..upstream.endpoint import BackendUnreachable, reconnect_wait
from ..upstream.session_wire import SessionLost, UpstreamSession

if TYPE_CHECKING:
    from ..fleet import Fleet

RELAY_SESSION = "relay-session"
"""Sealing purpose of a relayed session's id when several backends sit behind the proxy."""
RELAY_STATE = "relay-state"
"""Sealing purpose of a relayed backend's MRTR `requestState` when several backends sit behind the proxy."""

log = logging.getLogger(__name__)

SERVER_INFO = {"name": "mcp-tasks-proxy", "version": "0.1.0"}


class Reply:
    """A successful answer: the `result` object and extra HTTP headers."""

    __slots__ = ("result", "headers")

    def __init__(self, result: dict[str, Any], headers: Mapping[str, str] | None = None):
        self.result = result
        self.headers = dict(headers or {})


class Call:
    """One modern request in flight: who asks, with which envelope, forwarding which headers."""

    __slots__ = ("method", "params", "meta", "principal", "upstream_headers")

    def __init__(self, method: str, params: dict[str, Any], meta: ModernMeta, principal: str, upstream_headers: dict[str, str]):
        self.method = method
        self.params = params
        self.meta = meta
        self.principal = principal
        self.upstream_headers = upstream_headers


class ModernFace:
    """Handles `POST <path>` for modern clients; everything it answers is JSON."""

    def __init__(self, settings: Settings, keyring: Keyring, backend: Backend):
        self.settings = settings
        self.keyring = keyring
        self.backend = backend
        self._identity_header = settings.identity_header or "Authorization"
        self._reconnect_wait_s = settings.reconnect_wait_ms / 1000
        self.exchanges = ExchangeBook(lifetime_ms=settings.request_state_ttl_ms)
        self.session_face: Any = None
        """The session face for v1 and v2-session clients (set by the app)."""
        self.fleet: Fleet | None = None
        """All backends and the router (set by the app; with one backend, a fleet of this face's)."""

    # -- HTTP ------------------------------------------------------------------------------------

    async def handle_post(self, request: web.Request) -> web.StreamResponse:
        """Every POST: parse it, work out its dialect (docs/behaviour.md §2) and its backend (the
        fleet's router, `proxy/fleet.py`), and answer. New work that finds its backend unreachable
        goes to the next one; nothing was sent to the first."""
        principal = self.keyring.principal(request.headers.get(self._identity_header))
        request_id: Any = None
        method: str | None = None
        face = "v2-modern"
        target = self
        try:
            body = await read_body(request, self.settings.max_body_bytes, self.settings.body_timeout_ms / 1000)
            message = jsonrpc.parse(body)
            request_id = message.id if message.kind == "request" else None
            method = message.method
            params = message.params
            if not is_modern(message.method, params):
                if H_SESSION_ID in request.headers or message.method == "initialize":
                    face = "v1"
                    # A session is bound to its backend; with one backend, so is everything.
                    bound = H_SESSION_ID in request.headers or not self._fleet.multi
                    with reconnect_wait(self._reconnect_wait_s if bound else 0.0):
                        return await self._session_wire(request, message, body)
                raise not_modern_error(message, request)
            if not accepts_json(request.headers.get("Accept")):
                raise McpError(INVALID_REQUEST, "Not Acceptable: the Accept header must allow application/json", http_status=406)
            meta = read_meta(params)
            refuse_conflicting_duplicates(request)
            check_headers(message.method, params, meta, request.headers)
            target, bound = await self._route(message, meta, principal)
            tried: set[str] = set()
            while True:
                try:
                    with reconnect_wait(self._reconnect_wait_s if bound else 0.0):
                        return await target._serve(request, body, message, meta, principal)
                except BackendUnreachable:
                    tried.add(target.backend.name)
                    if bound or len(tried) >= len(self._fleet.stacks):
                        raise
                    target = (await self._fleet.pick(frozenset(tried))).face
        except McpError as exc:
            self._log_refusal(exc, principal, request)
            target._count(method, outcome_of(exc), face)
            answer_id = request_id if request_id is not None else exc.request_id
            return json_response(jsonrpc.error_response(answer_id, exc), modern_http_status(exc))
        except UnsupportedBackend as exc:
            target._count(method, str(INTERNAL_ERROR), face)
            error = McpError(INTERNAL_ERROR, str(exc), http_status=502)
            return json_response(jsonrpc.error_response(request_id, error), 502)
        except Exception:  # a proxy bug must not take the connection down without an answer
            log.exception("internal error answering a request from principal=%s", principal)
            target._count(method, str(INTERNAL_ERROR), face)
            error = McpError(INTERNAL_ERROR, "Internal error in mcp-tasks-proxy")
            return json_response(jsonrpc.error_response(request_id, error), 500)

    @property
    def _fleet(self) -> "Fleet":
        assert self.fleet is not None, "the application has not started"
        return self.fleet

    async def _route(self, message: jsonrpc.Message, meta: ModernMeta, principal: str) -> tuple["ModernFace", bool]:
        """The face of the backend that must answer, and whether the request is bound to it: a
        task by the backend sealed in its id, an MRTR retry by the one sealed in its
        `requestState`; other requests are new work for the router. With one backend, always it
        (ids that do not unseal are then refused where they are read, as before)."""
        fleet = self._fleet
        if not fleet.multi:
            return fleet.first.face, True
        params = message.params
        if message.method in TASK_METHODS_V2:
            if not meta.declares_tasks:
                raise missing_tasks_extension(f"{message.method} needs the tasks extension (io.modelcontextprotocol/tasks) declared on the request")
            ref = self.keyring.unseal_task_id(params.get("taskId"), principal)
            return fleet.named(ref.backend).face, True
        if message.method == "subscriptions/listen":
            names = {self.keyring.unseal_task_id(task_id, principal).backend for task_id in listened_task_ids(params)}
            if len(names) > 1:
                raise McpError(INVALID_PARAMS, "subscriptions/listen: with several backends, one subscription can only name tasks of one backend")
            if names:
                return fleet.named(names.pop()).face, True
        if message.method in MRTR_METHODS and "requestState" in params:
            stack = fleet.get(self._state_backend(params["requestState"], principal))
            if stack is None:
                raise McpError(INVALID_PARAMS, "Invalid requestState")
            return stack.face, True
        return (await fleet.pick()).face, False

    def _state_backend(self, token: Any, principal: str) -> str:
        """The backend an MRTR `requestState` belongs to: sealed by the proxy for a held exchange
        (exchange id, backend), or wrapping a relayed backend's own state (backend, state). Raises
        `McpError(-32602)` "Invalid requestState" for anything else (expired ones say so)."""
        try:
            relayed = self.keyring.unseal(RELAY_STATE, str(token), principal)  # (backend, its state)
        except ValueError:
            held = self.keyring.unseal_request_state(token, principal, int(time.time() * 1000))  # (exchange, backend)
            if len(held) != 2:
                raise McpError(INVALID_PARAMS, "Invalid requestState") from None
            return held[1]
        if len(relayed) != 2:
            raise McpError(INVALID_PARAMS, "Invalid requestState")
        return relayed[0]

    async def _serve(self, request: web.Request, body: bytes, message: jsonrpc.Message, meta: ModernMeta,
                     principal: str) -> web.StreamResponse:
        """A checked modern request, answered by this face's backend: relayed to a v2-modern
        backend, translated for the others."""
        # The dialect decides relay or translation: probe first when it is not known yet (a
        # backend that was down at start), so a v2 backend is never translated as v1.
        if (await self.backend.current()).dialect == "v2-modern":
            response = await self._relay_modern(request, body, message, principal)
            self._count(message.method, relay_outcome(response))
            return response
        if message.kind == "notification":
            self._count(message.method, "ok")
            return web.Response(status=202)
        if message.kind == "response":
            raise McpError(INVALID_REQUEST, "The 2026-07-28 wire has no server requests to answer")
        forward = self.settings.upstream_headers(request.headers)
        reply = await self.dispatch(Call(message.method, message.params, meta, principal, forward))
        self._count(message.method, "ok")
        return json_response(jsonrpc.result_response(message.id, reply.result), 200, reply.headers)

    async def _relay_modern(self, request: web.Request, body: bytes, message: jsonrpc.Message, principal: str) -> web.StreamResponse:
        """Relay to a v2-modern backend (docs/behaviour.md §3). With several backends, task ids and
        relayed `requestState`s are sealed toward the client and opened toward the backend
        (`translators.fleet_ids`), and the routing headers name the backend's own id."""
        params = message.params
        rewrite = None
        if self._fleet.multi:
            name = self.backend.name
            outbound = ids_to_backend(message.raw, functools.partial(self._relayed_task, principal=principal),
                                      functools.partial(self._relayed_state, principal=principal))
            body = jsonrpc.dumps(outbound)
            params = outbound.get("params") if isinstance(outbound.get("params"), dict) else {}

            def rewrite(answer: dict[str, Any]) -> dict[str, Any]:
                return ids_to_client(answer, lambda task: self.keyring.seal_task_id(TaskRef(name, "", task), principal),
                                     lambda state: self.keyring.seal(RELAY_STATE, (name, state), principal))
        routing = {H_METHOD: message.method}
        name_value = name_param(message.method, params)
        if name_value is not None:
            routing[H_NAME] = encode_header_value(name_value)
        answer_id = message.id if message.kind == "request" else None
        if rewrite is None:
            return await relay(request, self.backend.connector, body, self.settings.forward_headers, routing, method=message.method,
                               request_id=answer_id, v2=True, modern=True)
        return await relay(request, self.backend.connector, body, self.settings.forward_headers, set_headers=routing, rewrite=rewrite,
                           method=message.method, request_id=answer_id, v2=True, modern=True)

    def _relayed_task(self, task_id: str, *, principal: str) -> str:
        """The backend's own id inside a sealed id of a task relayed to this v2-modern backend.
        A task sealed for another backend, or created on a session (before this backend was
        upgraded), is unknown here: -32602."""
        ref = self.keyring.unseal_task_id(task_id, principal)
        if ref.backend != self.backend.name or ref.session:
            raise McpError(INVALID_PARAMS, "Unknown task")
        return ref.task

    def _relayed_state(self, token: str, *, principal: str) -> str:
        """The backend's own `requestState` inside one the proxy wrapped. Raises `McpError(-32602)`."""
        try:
            backend, state = self.keyring.unseal(RELAY_STATE, token, principal)
        except ValueError:  # does not unseal, or not two fields
            raise McpError(INVALID_PARAMS, "Invalid requestState") from None
        if backend != self.backend.name:
            raise McpError(INVALID_PARAMS, "Invalid requestState")
        return state

    # -- session-wire POSTs: relayed, or the proxy's own sessions -----------------------------------

    async def _session_wire(self, request: web.Request, message: jsonrpc.Message, body: bytes) -> web.StreamResponse:
        """A session-wire POST (docs/behaviour.md §2 rules 3–5): the proxy's own session, a relayed
        session (routed by the backend sealed in its id), or an `initialize` the router places."""
        fleet = self._fleet
        session_id = request.headers.get(H_SESSION_ID)
        if session_id is not None:
            if self.session_face is not None and self.session_face.owns(session_id):
                return await self.session_face.handle_post(request, message)  # counted by the session face
            routed = fleet.relayed_session(session_id)
            if routed is not None:
                stack, upstream_id = routed
                await stack.backend.current()
                if upstream_id is not None or stack.face._relays_session(request, message):
                    return await stack.face._relay_session(request, body, message, upstream_id)
            if self.session_face is not None:
                return await self.session_face.handle_post(request, message)  # 404: no such session
            raise not_modern_error(message, request)
        tried: set[str] = set()
        while True:
            stack = await fleet.pick(frozenset(tried))
            try:
                await stack.backend.current()  # the backend's dialect decides relay or translation
                if stack.face._relays_session(request, message):
                    return await stack.face._relay_session(request, body, message, None)
                break
            except BackendUnreachable:
                tried.add(stack.name)
                if len(tried) >= len(fleet.stacks):
                    raise
        if self.session_face is None:
            raise not_modern_error(message, request)
        return await self.session_face.handle_post(request, message, stack)

    async def _relay_session(self, request: web.Request, body: bytes, message: jsonrpc.Message,
                             upstream_id: str | None) -> web.StreamResponse:
        """Relay a session of the backend's own dialect; with several backends the session id the
        backend hands out is sealed with the backend's name (and opened again: `upstream_id`), and
        task ids are sealed with backend and session both ways (`Fleet.session_task_ids`)."""
        fleet = self._fleet
        task_ids = fleet.session_task_ids(self.backend.name, upstream_id)
        rewrite = None
        if task_ids is not None:
            to_backend, rewrite = task_ids
            try:
                body = jsonrpc.dumps(to_backend(message.raw))
            except McpError as exc:  # a task id not sealed for this session: never sent upstream
                answer_id = message.id if message.kind == "request" else None
                self._count(message.method, outcome_of(exc), "v1")
                return json_response(jsonrpc.error_response(answer_id, exc), 200)
        response = await relay(request, self.backend.connector, body, self.settings.forward_headers,
                               session_id=upstream_id, seal_session=fleet.session_sealer(self.backend.name), rewrite=rewrite,
                               method=message.method, request_id=message.id if message.kind == "request" else None,
                               v2=self.backend.dialect == "v2-session")
        self._count(message.method, relay_outcome(response), "v1")
        return response

    def _count(self, method: str | None, outcome: str, face: str = "v2-modern") -> None:
        """One answered request in `mcp_tasks_proxy_requests_total`."""
        self.backend.metrics.request(face, self.backend.dialect, method, outcome)

    def _relays_session(self, request: web.Request, message: jsonrpc.Message) -> bool:
        """A session client of the backend's own dialect is relayed (v1 → v1, v2-session →
        v2-session): an `initialize` of that dialect, or a session id the proxy did not issue."""
        dialect = self.backend.profile.dialect if self.backend.profile is not None else None
        if dialect not in ("v1", "v2-session"):
            return False
        if message.method == "initialize" and H_SESSION_ID not in request.headers:
            capabilities = message.params.get("capabilities")
            extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
            client = "v2-session" if isinstance(extensions, dict) and TASKS_EXTENSION in extensions else "v1"
            return client == dialect
        return self.session_face is None or not self.session_face.owns(request.headers.get(H_SESSION_ID, ""))

    def _log_refusal(self, exc: McpError, principal: str, request: web.Request) -> None:
        if isinstance(exc, BackendUnreachable):  # the backend's handle logged it going down, once
            log.info("backend unreachable for principal=%s: %s", principal, exc.message)
        elif exc.http_status == 502:
            log.warning("backend failure for principal=%s: %s", principal, exc.message)
        else:
            log.info("refused request from principal=%s peer=%s: %d %s", principal, request.remote, exc.code, exc.message)

    # -- dispatch ----------------------------------------------------------------------------------

    async def dispatch(self, call: Call) -> Reply:
        """Answer one validated modern request. Raises `McpError` for every refusal."""
        method = call.method
        if method == "server/discover":
            return Reply(await self.discover())
        if method == "tools/call":
            if self.backend.dialect == "v2-session":
                return await self.call_tool_v2_session(call)
            return await self.call_tool(call)
        if method in TASK_METHODS_V2:
            if not call.meta.declares_tasks:
                raise missing_tasks_extension(f"{method} needs the tasks extension (io.modelcontextprotocol/tasks) declared on the request")
            ref = self._unseal(call)
            if self.backend.dialect == "v2-session":
                return await self.task_v2_session(call, ref)
            if method == "tasks/get":
                return await self.get_task(call, ref)
            if method == "tasks/update":
                return await self.update_task(call, ref)
            return await self.cancel_task(call, ref)
        if method in REMOVED_TASK_METHODS_V2:
            raise McpError(METHOD_NOT_FOUND, f"Method not found: {method} does not exist on the {MODERN_VERSION} wire; tasks/get inlines results", method)
        if method == "subscriptions/listen" or method in REMOVED_MODERN_METHODS or method.startswith("tasks/"):
            raise McpError(METHOD_NOT_FOUND, f"Method not found: {method}", method)
        if method in MRTR_METHODS:
            name = call.params.get("name") if method == "prompts/get" else call.params.get("uri")
            if "requestState" in call.params:
                return await self._resume(call, str(name))
            return await self._exchange(call, str(name), strip_mrtr(strip_envelope(call.params)))
        return await self.forward(call)

    def _unseal(self, call: Call) -> TaskRef:
        """The task a translated `tasks/*` call names: sealed for this backend, on an upstream
        session (an id without one was relayed to this backend when it spoke v2-modern). Raises
        `McpError(-32602)` "Unknown task"."""
        ref = self.keyring.unseal_task_id(call.params.get("taskId"), call.principal)
        if ref.backend != self.backend.name or not ref.session:
            raise McpError(INVALID_PARAMS, "Unknown task")
        return ref

    async def _session(self, call: Call) -> UpstreamSession:
        if self.backend.dialect == "v2-session":
            caps = session_capabilities(call.meta)  # the extension rides on the session
        else:
            caps = upstream_client_capabilities(call.meta.client_capabilities)
        return await self.backend.pool.shared(call.principal, caps, call.upstream_headers)

    async def _upstream(self, call: Call, method: str, params: dict[str, Any], *, session: UpstreamSession | None = None) -> dict[str, Any]:
        """A request on the caller's pooled session; a session the backend forgot (404 before it
        processed anything) is re-created and the request sent once more."""
        session = session or await self._session(call)
        try:
            return await session.request(method, params, headers=call.upstream_headers)
        except SessionLost:
            session = await self._session(call)
            return await session.request(method, params, headers=call.upstream_headers)

    async def discover(self) -> dict[str, Any]:
        """`server/discover` answered by the proxy (docs/behaviour.md §4.9)."""
        profile = await self.backend.current()
        result: dict[str, Any] = {
            "supportedVersions": [MODERN_VERSION],
            "capabilities": server_capabilities_to_v2(profile.capabilities),
        }
        if profile.offers_tool_tasks:  # v1 `tasks.requests.tools.call`, or a v2-session backend's extension
            result["capabilities"]["extensions"] = {TASKS_EXTENSION: {}}
        if profile.instructions:
            result["instructions"] = profile.instructions
        return with_server_info(complete_result("server/discover", result, cache_ttl_ms=self.settings.cache_ttl_ms), SERVER_INFO)

    async def forward(self, call: Call) -> Reply:
        """Any other method, forwarded with the modern envelope removed (docs/behaviour.md §4.8)."""
        result = await self._upstream(call, call.method, strip_envelope(call.params))
        if call.method == "tools/list" and isinstance(result.get("tools"), list):
            result = {**result, "tools": [tool_to_v2(t) if isinstance(t, dict) else t for t in result["tools"]]}
        return Reply(complete_result(call.method, result, cache_ttl_ms=self.settings.cache_ttl_ms))

    async def call_tool(self, call: Call) -> Reply:
        """`tools/call`: the proxy decides task or not (docs/behaviour.md §4.2); input asked for
        during the call becomes MRTR rounds (§4.8)."""
        name = call.params.get("name")
        if not isinstance(name, str) or not name:
            raise McpError(INVALID_PARAMS, "tools/call needs params.name (a string)")
        if "requestState" in call.params:
            return await self._resume(call, name)
        support = await self.backend.tool_support(name) or "forbidden"
        profile = await self.backend.current()
        decision = creation_decision(
            declared=call.meta.declares_tasks,
            support=support,
            backend_offers_tasks=profile.offers_tool_tasks,
            optional_tools=self.settings.optional_tools,
            required_without_extension=self.settings.required_without_extension,
        )
        params = strip_mrtr(drop_task_param(strip_envelope(call.params)))
        if decision == "reject":
            raise missing_tasks_extension(
                f"Tool {name!r} requires the tasks extension (io.modelcontextprotocol/tasks); the client did not declare it for this request."
            )
        if decision == "sync":
            return await self._exchange(call, name, params)
        ephemeral = self.settings.v1_session_scope == "task"
        if ephemeral:
            session = await self.backend.pool.fresh(upstream_client_capabilities(call.meta.client_capabilities), call.upstream_headers)
        else:
            session = await self._session(call)
        await self.backend.follower.inputs.listening(session, call.upstream_headers, ephemeral=ephemeral)
        params["task"] = task_param_v1(self.settings.task_ttl_ms)
        return await self._exchange(call, name, params, session=session, creates_task=decision)

    # -- MRTR: synchronous calls that may ask for input ---------------------------------------------

    async def _exchange(self, call: Call, name: str, params: dict[str, Any], *, session: UpstreamSession | None = None,
                        creates_task: str | None = None) -> Reply:
        """Start the upstream call as a held exchange and answer its first round."""
        shared = session is None or self.settings.v1_session_scope == "principal"
        session = session or await self._session(call)
        exchange = self.exchanges.open(call.principal, call.method, name, session, call.upstream_headers, creates_task)
        exchange.start(functools.partial(session.request, call.method, params, headers=call.upstream_headers))
        try:
            return await self._round(call, exchange)
        except SessionLost:
            if not shared:
                raise McpError(INTERNAL_ERROR, f"Backend {self.backend.name!r} lost the upstream session") from None
            # The backend forgot the pooled session before processing anything: once more, anew.
            session = await self._session(call)
            exchange = self.exchanges.open(call.principal, call.method, name, session, call.upstream_headers, creates_task)
            exchange.start(functools.partial(session.request, call.method, params, headers=call.upstream_headers))
            return await self._round(call, exchange)

    async def _resume(self, call: Call, name: str) -> Reply:
        """An MRTR retry: answer the held exchange's requests upstream, then its next round."""
        fields = self.keyring.unseal_request_state(call.params.get("requestState"), call.principal, int(time.time() * 1000))
        responses = read_input_responses(call.params)
        exchange = self.exchanges.take(fields[0] if fields else "", call.principal, call.method, name)
        try:
            await exchange.deliver(responses)
        except SessionLost:
            self.exchanges.drop(exchange)
            raise McpError(INVALID_PARAMS, "Unknown or expired requestState: the backend lost the session") from None
        return await self._round(call, exchange)

    async def _round(self, call: Call, exchange: Exchange) -> Reply:
        """The next answer of an exchange: the final result, or an `InputRequiredResult`."""
        try:
            requests = await exchange.next_round()
        except asyncio.CancelledError:
            # The client went away. An exchange never handed out is cancelled upstream (the
            # backend hears notifications/cancelled); a held one waits for the client's retry.
            if not self.exchanges.is_held(exchange):
                exchange.abandon()
            raise
        if requests is not None:
            self.exchanges.hold(exchange)
            expires_ms = int(time.time() * 1000) + self.settings.request_state_ttl_ms
            state = self.keyring.seal_request_state((exchange.id, self.backend.name), call.principal, expires_ms)
            return Reply(input_required_result(requests, state))
        self.exchanges.release(exchange)
        assert exchange.upstream is not None
        answer = exchange.upstream.result()
        if exchange.context == "v2-session" and answer.get("resultType") == "task":
            created = created_task_from_v2(answer)
            ref = TaskRef(self.backend.name, exchange.session.session_id or "", created.task_id)
            task_id = self.keyring.seal_task_id(ref, call.principal)
            return Reply(created_task_result_v2(created.evolve(task_id=task_id)), {H_NAME: task_id})
        if exchange.context in (None, "v2-session") or "task" not in answer:
            # A plain result (also when the backend ran a task-supporting tool inline after all).
            return Reply(complete_result(exchange.method, answer, cache_ttl_ms=self.settings.cache_ttl_ms))
        created = created_task_to_v2(answer)
        if created.dropped:
            self.backend.metrics.dropped(created.dropped, "a v1 CreateTaskResult")
        ref = TaskRef(self.backend.name, exchange.session.session_id or "", created.task_id)
        self.backend.follower.created(ref, exchange.session, call.upstream_headers, created.ttl_ms)
        if exchange.context == "wait":
            return Reply(await self._wait(call, ref, exchange.session))
        task_id = self.keyring.seal_task_id(ref, call.principal)
        return Reply(created_task_result_v2(created.evolve(task_id=task_id)), {H_NAME: task_id})

    # -- v2-session backends: the same v2 semantics, carried on a session ---------------------------

    async def call_tool_v2_session(self, call: Call) -> Reply:
        """`tools/call` on a v2-session backend: the backend decides; its questions during the call
        become MRTR rounds; a created task's id is sealed with its session."""
        name = call.params.get("name")
        if not isinstance(name, str) or not name:
            raise McpError(INVALID_PARAMS, "tools/call needs params.name (a string)")
        if "requestState" in call.params:
            return await self._resume(call, name)
        params = strip_mrtr(drop_task_param(strip_envelope(call.params)))
        return await self._exchange(call, name, params, creates_task="v2-session")

    async def task_v2_session(self, call: Call, ref: TaskRef) -> Reply:
        """`tasks/get`, `tasks/update`, `tasks/cancel` on the session that owns the task; its id is
        the client's sealed one in the answer."""
        session = self.backend.pool.by_id(ref.session)
        params = {**strip_envelope(call.params), "taskId": ref.task}
        try:
            result = await session.request(call.method, params, headers=call.upstream_headers)
        except SessionLost:
            raise McpError(INVALID_PARAMS, "Unknown task") from None
        except McpError as exc:
            if exc.code == INVALID_PARAMS:
                raise McpError(INVALID_PARAMS, "Unknown task") from None
            raise
        if "taskId" in result:
            result = {**result, "taskId": call.params["taskId"]}
        if call.method == "tasks/get":
            result = inline_result_type(result)
        return Reply(result if "resultType" in result else complete_result(call.method, result))

    async def _wait(self, call: Call, ref: TaskRef, session: UpstreamSession) -> dict[str, Any]:
        """`required_without_extension = "wait"`: follow the upstream task to its end and answer
        the final result, or its error as a JSON-RPC error."""
        while True:
            task = await self.backend.follower.status(ref, session, call.upstream_headers)
            if task.status == "completed" and task.result is not None:
                return complete_result("tools/call", task.result)
            if task.status == "failed" and task.error is not None:
                raise McpError(task.error.code, task.error.message, task.error.data)
            if task.status == "cancelled":
                raise McpError(INTERNAL_ERROR, "Task was cancelled")
            await asyncio.sleep((task.poll_interval_ms or self.settings.wait_poll_ms) / 1000)

    async def get_task(self, call: Call, ref: TaskRef) -> Reply:
        """`tasks/get` (docs/behaviour.md §4.4)."""
        task = await self.backend.follower.status(ref, self.backend.pool.by_id(ref.session), call.upstream_headers)
        return Reply(get_task_result_v2(task.evolve(task_id=call.params["taskId"])))

    async def update_task(self, call: Call, ref: TaskRef) -> Reply:
        """`tasks/update` (docs/behaviour.md §4.5): each outstanding key's answer goes upstream as the
        response to the captured request; unknown, answered or late keys are ignored."""
        responses = read_input_responses(call.params)
        session = self.backend.pool.by_id(ref.session)
        await self.backend.follower.answer(ref, session, responses, call.upstream_headers)
        return Reply(update_ack_v2())

    async def cancel_task(self, call: Call, ref: TaskRef) -> Reply:
        """`tasks/cancel` (docs/behaviour.md §4.6): whatever the v1 backend answers becomes the ack."""
        session = self.backend.pool.by_id(ref.session)
        try:
            await session.request("tasks/cancel", {"taskId": ref.task}, headers=call.upstream_headers)
        except SessionLost:
            pass
        except McpError as exc:
            if exc.http_status is not None:
                raise
        self.backend.follower.forget(ref)
        return Reply(cancel_answer_v2())
