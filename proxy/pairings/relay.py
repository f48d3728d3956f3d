"""Relay: the same dialect on both sides (docs/behaviour.md §3). Bytes are forwarded unchanged: SSE
streams (and bodies of unknown or large size) as they arrive, a JSON answer of known length in one
write; nothing is parsed beyond what routing already read, except ids: a relayed session's id is
sealed with the backend whatever the size of the fleet (docs/decisions.md §83), so the caller gives
`session_id` (the upstream session a sealed `Mcp-Session-Id` names) and `seal_session` (for the id a
backend hands out); modern task ids with several backends (decision 192), and a session's from
before decision 190, are sealed too, by `rewrite`, applied to every JSON-RPC message of the answer
that may hold one, SSE event by event.
Beyond that, only answers that are not the usual 200 (an error status, an SSE answer for a client
that takes only JSON) or that a v2 backend's need repairing are parsed (docs/decisions.md §36, §37).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web

from translators import jsonrpc
from translators.envelope import encode_header_value, name_param
from translators.errors import (
    ELSEWHERE,
    INVALID_PARAMS,
    NOT_ISSUED,
    McpError,
    backend_http_error,
    backend_unavailable,
    unknown_task,
)
from translators.fleet_ids import ids_to_backend, ids_to_client, may_carry_ids
from translators.held import initialize_held_v1
from translators.protocol import H_METHOD, H_NAME, H_SESSION_ID
from translators.sealing import PLAIN_TASK_IDS, RELAY_SESSION, RELAY_STATE, TaskRef
from translators.subscriptions import may_need_v2_repair, v2_repaired
from translators.tool_results import NOT_ENDED, TOOL_METHODS, of_bytes, of_message

from ..faces.call import SEEN, Call
from ..faces.checks import stream_to, takes_sse
from ..sse import SseParser
from ..upstream.endpoint import ACCEPT_BOTH, IDEMPOTENT_METHODS, Endpoint, raise_for_challenge
from ..upstream.tls import failure
from .forward import (
    PARAM_PREFIX,
    RESPONSE_HEADERS,
    WHOLE_BODY_MAX,
    Forward,
    Rewrite,
    UpstreamSession,
    error_answer,
    final_answer,
    name_from_result,
    rewrite_data,
    wanted_headers,
)
from .parts import MemberParts
from .relay_sse import Written, _frame, _repaired_body, noting_answer, relay_stream

log = logging.getLogger(__name__)


async def relay(request: web.Request, backend: Endpoint, body: bytes | None, forward: Forward) -> web.StreamResponse:
    """Forward `request` (with `body` for POST) to `backend` as `forward` says, and stream its
    answer back. The request headers named in `forward.wanted` and every `Mcp-Param-*` go on;
    `set_headers` replace the client's. `session_id`, `seal_session` and `rewrite`: see the module docstring. `method`: the
    JSON-RPC method of a POST, whose time to the backend's response headers is recorded in
    `mcp_tasks_proxy_upstream_seconds`; `request_id` its id (for an error the proxy answers in the
    backend's stead); `parsed` the message `body` holds, when known (a stdio backend then does not
    parse it again, docs/decisions.md §116).

    `v2`: the backend speaks v2 (v2-modern, v2-session), so an error answer's draft code `-32003`
    becomes `-32021` and a task status notification under v1's name gets the extension's
    (`translators.subscriptions.v2_repaired`; only a JSON body or SSE event whose bytes may need it
    is parsed: `may_need_v2_repair`). `modern`: the modern wire, where a client that accepts
    only JSON is served too: the backend is asked with both media types, and an SSE answer reaches
    such a client as its final JSON-RPC message (docs/decisions.md §36). A backend's HTTP error
    status without a JSON-RPC body reaches the client as a JSON-RPC error naming the backend
    (`translators.errors.backend_http_error`), logged once. The usual answer (200 with JSON, or an
    SSE stream the client accepts) is passed on without parsing. `rewrite_every`: `rewrite` sees
    every message of the answer, also one that holds no id (a relayed `initialize` that declares
    held tasks).

    A backend's Bearer challenge (401/403 with `WWW-Authenticate: Bearer`) raises
    `translators.oauth.AuthChallenge` for the entry to answer (docs/decisions.md §80). A POST that
    cannot be sent raises the connector's `McpError` (`BackendUnreachable` when no connection
    could be made, so that new work may go to another backend); a GET or DELETE that cannot be
    sent gets the client a 502 with a JSON-RPC error naming the backend.

    The answer to a method that can end a tool call (`TOOL_METHODS`) is also read for what it says
    of the tool's outcome, left in `forward.seen` for the observer (`_noted`): a JSON body by a
    bytes search first (`tool_results.of_bytes`), a stream by its last event.
    """
    client_headers = request.headers
    headers = {name: client_headers[name] for name in forward.wanted if name in client_headers}
    # A tool's x-mcp-header arguments (wire.md §4.3), looked for in one C-level pass over the names:
    # most requests have none, and a loop over every header cost each relayed call 2 % (issue 38).
    if PARAM_PREFIX in "\n" + "\n".join(client_headers.keys()).lower():
        for name, value in client_headers.items():
            if name[:10].lower() == "mcp-param-":
                headers[name] = value
    set_headers, session_id, method, v2 = forward.set_headers, forward.session_id, forward.method, forward.v2
    if set_headers:
        headers.update(set_headers)
    if session_id is not None:
        headers[H_SESSION_ID] = session_id
    accept = headers.get("Accept")
    json_only = forward.modern and not takes_sse(accept)
    if accept is None or json_only:
        headers["Accept"] = ACCEPT_BOTH  # a client without Accept takes anything (RFC 9110 §12.5.1)
    started = time.perf_counter()
    try:
        if request.method == "POST":
            upstream = await backend.post(body or b"", headers, idempotent=method in IDEMPOTENT_METHODS, parsed=forward.parsed)
            if method is not None:
                backend.on_hop(method, time.perf_counter() - started)
        else:
            upstream = await backend.http.request(request.method, backend.url, headers={**backend.extra_headers, **headers},
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=10), **backend.request_options)
            await raise_for_challenge(upstream, backend.name)  # a Bearer challenge reaches the client (decision 80)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        tls = failure(exc)
        error = backend_unavailable(backend.name, f"TLS handshake failed: {tls}" if tls else f"cannot reach it ({exc.__class__.__name__})")
        return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(None, error)), status=502, content_type="application/json")
    async with upstream:
        headers = {name: upstream.headers[name] for name in RESPONSE_HEADERS if name in upstream.headers}
        seal_session = forward.seal_session
        if seal_session is not None and H_SESSION_ID in headers:
            headers[H_SESSION_ID] = seal_session(headers[H_SESSION_ID])
        is_sse = upstream.headers.get("Content-Type", "").startswith("text/event-stream")
        length = upstream.content_length
        if upstream.status >= 400 and (length is None or length <= WHOLE_BODY_MAX):
            return await _relay_http_error(upstream, headers, backend.name, forward, method or request.method)
        if is_sse and json_only:
            return _noted(request, forward, await final_answer(upstream, headers, backend.name, forward))
        if forward.rewrite is not None:
            return await _relay_rewritten(request, upstream, headers, backend.name, forward)
        if length is not None and length <= WHOLE_BODY_MAX and not is_sse:
            # A body of known, modest length (a JSON answer, a 202): one read, one write downstream
            # with its Content-Length, instead of a chunked stream of three writes.
            try:
                body = await upstream.read()
            except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
                log.info("relay from %s ended early: %s", backend.name, exc.__class__.__name__)
                return error_answer(backend_unavailable(backend.name, f"connection failed while reading: {exc.__class__.__name__}"), None)
            if v2 and may_need_v2_repair(body):
                body = _repaired_body(body)
            if method in TOOL_METHODS:
                forward.seen = of_bytes(method, body, v1=not v2)
            return web.Response(body=body, status=upstream.status, headers=headers)
        response = web.StreamResponse(status=upstream.status, headers=headers)
        await stream_to(request, response)
        written = Written()
        try:
            await relay_stream(request, upstream, response, repair=v2 and is_sse, written=written)
            await response.write_eof()
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            log.info("relay from %s ended early: %s", backend.name, exc.__class__.__name__)
        return _noted(request, forward, response, written)


def _noted(request: web.Request, forward: Forward, response: web.StreamResponse, written: Written | None = None) -> web.StreamResponse:
    """`response`, with what it says of a tool call left in `forward.seen` when it answers a
    `TOOL_METHODS` request: a whole body's, else the last event `written`. (The usual JSON answer
    is read where it is written, without this call.)"""
    method = forward.method
    if method in TOOL_METHODS:
        raw = response.body if isinstance(response, web.Response) else (written.last_data() if written is not None else None)
        forward.seen = of_bytes(method, raw, v1=not forward.v2) if isinstance(raw, bytes) else NOT_ENDED
    return response


def _relabelled(message: dict[str, Any], raw: bytes, rewrite: Rewrite, v2: bool) -> dict[str, Any]:
    """`message` (parsed from `raw`) with `rewrite` applied, and for a v2 backend the v2 repairs
    where its bytes may need them (`may_need_v2_repair`), as for every relayed answer."""
    message = rewrite(message)
    return v2_repaired(message) if v2 and may_need_v2_repair(raw) else message


async def _relay_http_error(upstream: aiohttp.ClientResponse, headers: dict[str, str], backend: str, forward: Forward,
                            what: str) -> web.Response:
    """A backend's HTTP error status (4xx/5xx): its JSON-RPC body passed on (ids rewritten, codes
    renumbered as for any answer), or, when it has none (empty, HTML, not JSON-RPC), a JSON-RPC
    error naming the backend (`backend_http_error`) and one log line (docs/decisions.md §36)."""
    request_id, v2, rewrite = forward.request_id, forward.v2, forward.rewrite
    try:
        raw = await upstream.read()
    except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
        return error_answer(backend_unavailable(backend, f"connection failed while reading: {exc.__class__.__name__}"), request_id)
    message: dict[str, Any] | None = None
    if upstream.headers.get("Content-Type", "").startswith("application/json"):
        try:
            message = jsonrpc.parse(raw).raw
        except McpError:
            message = jsonrpc.unaddressed_error(raw)  # e.g. a 404 for an unknown session, without an id
    if message is None or "error" not in message:
        log.warning("backend %s answered HTTP %d without a JSON-RPC body to %s", backend, upstream.status, what)
        error = backend_http_error(backend, upstream.status)
        passed = {name: value for name, value in headers.items() if name not in ("Content-Type", H_NAME)}
        answer = error_answer(error, request_id)
        answer.headers.update(passed)
        return answer
    if rewrite is None and not (v2 and may_need_v2_repair(raw)):
        return web.Response(body=raw, status=upstream.status, headers=headers)
    if rewrite is not None:
        message = rewrite(message)
        name_from_result(headers, message)
    if v2:
        message = v2_repaired(message)
    return web.Response(body=jsonrpc.dumps(message), status=upstream.status, headers=headers)


async def _relay_rewritten(request: web.Request, upstream: aiohttp.ClientResponse, headers: dict[str, str], backend: str,
                           forward: Forward) -> web.StreamResponse:
    """The answer with `forward.rewrite` applied to each JSON-RPC message (with `v2`, legacy codes
    renumbered too): a JSON body whole, an SSE body event by event as they arrive. A body that is
    not JSON-RPC passes unchanged, and so does one that holds no id to rewrite
    (`fleet_ids.may_carry_ids`; with `v2`, nor a legacy code), without being parsed, unless
    `rewrite_every`. The backend's `Mcp-Name` is replaced by the rewritten result's `taskId` (the
    sealed id), if it has one."""
    v2, every = forward.v2, forward.rewrite_every
    rewrite = forward.rewrite
    assert rewrite is not None
    is_sse = upstream.headers.get("Content-Type", "").startswith("text/event-stream")

    def untouched(raw: bytes) -> bool:
        return not every and not may_carry_ids(raw) and not (v2 and may_need_v2_repair(raw))

    headers.pop(H_NAME, None)  # the backend's own task id: set again below from the rewritten answer
    if not is_sse:
        try:
            raw = await upstream.read()
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            error = backend_unavailable(backend, f"connection failed while reading: {exc.__class__.__name__}")
            return web.Response(body=jsonrpc.dumps(jsonrpc.error_response(None, error)), status=502, content_type="application/json")
        tool_method = forward.method in TOOL_METHODS
        if untouched(raw):
            if tool_method:  # no task id in it (`untouched`): only its isError to read
                forward.seen = of_bytes(forward.method, raw, v1=not forward.v2, no_ids=True)  # type: ignore[arg-type]
            return web.Response(body=raw, status=upstream.status, headers=headers)
        try:
            message = jsonrpc.parse(raw).raw
        except McpError:
            return web.Response(body=raw, status=upstream.status, headers=headers)
        message = _relabelled(message, raw, rewrite, v2)
        name_from_result(headers, message)
        if tool_method:
            forward.seen = of_message(forward.method, message, v1=not forward.v2)  # type: ignore[arg-type]
        return web.Response(body=jsonrpc.dumps(message), status=upstream.status, headers=headers)
    response = web.StreamResponse(status=upstream.status, headers=headers)
    await stream_to(request, response)
    parser = SseParser()
    written = Written()
    try:
        with noting_answer(request, written):
            async for chunk in upstream.content.iter_any():
                for event in parser.feed(chunk):
                    data = event.data.encode()
                    if not untouched(data):
                        data = rewrite_data(data, functools.partial(_relabelled, raw=data, rewrite=rewrite, v2=v2))
                    await response.write(frame := _frame(event, data))
                    written.whole(frame)
        await response.write_eof()
    except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
        log.info("relay from %s ended early: %s", backend, exc.__class__.__name__)
    return _noted(request, forward, response, written)


def _initialize_held(message: dict[str, Any]) -> dict[str, Any]:
    """A relayed v1 `initialize` answer that declares the held tasks (`translators.held.initialize_held_v1`)."""
    result = message.get("result")
    return {**message, "result": initialize_held_v1(result)} if isinstance(result, dict) else message


def _telling(sealer: Callable[[str], str] | None, tell: Callable[[str], None]) -> Callable[[str], str]:
    """`sealer` (None: ids as they are) that also tells `tell` the id it hands out."""

    def seal(session_id: str) -> str:
        shown = sealer(session_id) if sealer is not None else session_id
        tell(shown)
        return shown

    return seal


class Relay:
    """The diagonal of the pairing table (docs/behaviour.md §3): a client of the backend's own
    dialect. On the modern wire a request is relayed with its routing headers; on the session wire
    a relayed session's requests are. Ids are relabelled (`translators.fleet_ids`, docs/decisions.md
    §83) so that they stay routable when backends are added or removed: modern task ids and
    `requestState`s sealed with the backend toward the client and opened toward it, unless
    `own_task_ids` (the fleet's only backend, over HTTP: decision 192); a session id sealed with the
    backend's name. `plain_ids` (set by the fleet: `Fleet.plain_owner`): ids that do not unseal
    are taken, passed on as they are and answered as they are."""

    def __init__(self, parts: MemberParts):
        self.parts = parts
        self.settings = parts.settings
        self.wanted = wanted_headers(parts.settings.forward_headers)
        self.keyring = parts.keyring
        self.backend = parts.backend
        self.plain_ids = False
        self.own_task_ids = False  # set by the fleet: modern task ids and states pass as given (decision 192)

    async def modern(self, call: Call) -> web.StreamResponse:
        """Relay a checked modern call to this v2-modern backend, its answer back."""
        request, body, message, principal = call.request, call.body, call.message, call.principal
        assert message is not None and principal is not None
        name = self.backend.name
        plain: set[str] = set()  # plain ids of this request (docs/decisions.md §83): answered plain
        outbound = message.raw
        opened: list[str] = []  # the sealed ids opened: then the answer's are sealed, whatever `own_task_ids`
        if may_carry_ids(body):  # else no id to open: the client's bytes go as they came (decision 117)
            outbound = ids_to_backend(message.raw, functools.partial(self._relayed_task, principal=principal, plain=plain, opened=opened),
                                      functools.partial(self._relayed_state, principal=principal, opened=opened))
            if opened:  # else every id is plain: the client's bytes go as they came
                body = jsonrpc.dumps(outbound)
        params = outbound.get("params") if isinstance(outbound.get("params"), dict) else {}

        def seal_task(task: str) -> str:
            return task if task in plain else self.keyring.seal_task_id(TaskRef(name, "", task), principal)

        def rewrite(answer: dict[str, Any]) -> dict[str, Any]:  # and the v2 repairs (`v2_repaired`), as for every v2 backend
            return ids_to_client(answer, seal_task, lambda state: self.keyring.seal(RELAY_STATE, (name, state), principal))

        routing = {H_METHOD: message.method}
        name_value = name_param(message.method, params)
        if name_value is not None:
            routing[H_NAME] = encode_header_value(name_value)
        answer_id = message.id if message.kind == "request" else None
        forward = Forward(self.wanted, routing, rewrite=rewrite if opened or not self.own_task_ids else None, method=message.method,
                          request_id=answer_id, v2=True, modern=True, parsed=outbound)
        response = await relay(request, self.backend.connector, body, forward)
        call.seen = forward.seen
        return response

    def _relayed_task(self, task_id: str, *, principal: str, plain: set[str], opened: list[str]) -> str:
        """The backend's own id inside a sealed id of a task relayed to this v2-modern backend.
        A task sealed for another backend, or created on a session (before this backend was
        upgraded), is unknown here: -32602. An id that does not unseal is a plain id from before
        (docs/decisions.md §83) when this backend takes them (`plain_ids`): passed on unchanged and
        added to `plain`; otherwise -32602 "Unknown task". An id opened is added to `opened`."""
        ref = self.keyring.opened_task_id(task_id, principal)  # no exception made for a plain id, the usual one alone
        if ref is None:
            if not self.plain_ids:
                self.keyring.unseal_task_id(task_id, principal)  # raises its "Unknown task"
            plain.add(task_id)
            return task_id
        if ref.backend != self.backend.name or ref.session:
            raise unknown_task(ELSEWHERE)
        opened.append(task_id)
        return ref.task

    def _relayed_state(self, token: str, *, principal: str, opened: list[str]) -> str:
        """The backend's own `requestState` inside one the proxy wrapped (added to `opened`). Raises `McpError(-32602)`."""
        try:
            backend, state = self.keyring.unseal(RELAY_STATE, token, principal)
        except ValueError:  # does not unseal, or not two fields
            if self.plain_ids:
                return token  # a plain state from before (docs/decisions.md §83)
            raise McpError(INVALID_PARAMS, "Invalid requestState") from None
        if backend != self.backend.name:
            raise McpError(INVALID_PARAMS, "Invalid requestState")
        opened.append(token)
        return state

    def session_body(self, message: jsonrpc.Message, body: bytes, upstream: UpstreamSession) -> bytes:
        """The body a relayed session's POST goes upstream with: on a session whose task ids are
        sealed, task ids opened for this session. Raises `McpError(-32602)` for a task id not sealed
        for it (never sent upstream)."""
        task_ids = self.session_task_ids(upstream)
        if task_ids is None:
            return body
        if not may_carry_ids(body):  # no id to open: the client's bytes go as they came (decision 117)
            return body
        return jsonrpc.dumps(task_ids[0](message.raw))

    async def session(self, request: web.Request, body: bytes | None, message: jsonrpc.Message | None,
                      upstream: UpstreamSession, on_session: Callable[[str], None] | None = None) -> web.StreamResponse:
        """Relay a request of a session of the backend's own dialect (a POST's checked `body`, or a
        GET or DELETE: `message` None); the session id the backend hands out at `initialize` is
        sealed with the backend's name (and opened again: `upstream.id`). The session's task ids
        are the backend's own both ways when `upstream.plain_task_ids` (a session begun since
        decision 190 where `plain_task_ids` holds: the session routes them), else sealed with
        backend and session both ways (`session_task_ids`). A plain session id from before
        (`upstream.id` None after `initialize`, docs/decisions.md §83) keeps its plain ids.
        `on_session` is called with the session id the client is given, as soon as the backend's
        answer names one (an `initialize`)."""
        upstream_id = upstream.id
        task_ids = self.session_task_ids(upstream)
        rewrite = task_ids[1] if task_ids is not None else None
        initialize = message is not None and message.method == "initialize"
        sealer = None
        if upstream_id is not None or initialize:  # a new session's task ids travel as this backend's do now
            sealer = self.session_sealer(request, self.plain_task_ids if initialize else upstream.plain_task_ids)
        if on_session is not None:
            sealer = _telling(sealer, on_session)
        v2 = self.backend.dialect == "v2-session"
        if message is None:
            return await relay(request, self.backend.connector, None, Forward(self.wanted, session_id=upstream_id, seal_session=sealer,
                                                                              rewrite=rewrite, v2=v2))
        caller = None
        every = False
        if initialize:
            if not self.backend.connector.KNOWS_CALLERS:
                # a stdio backend's process is chosen for the proxy's principal, not the Authorization (decision 144)
                caller = self.backend.connector.caller_headers(self._binding(request))
            if await self._declares_held_tasks():
                rewrite, every = _initialize_held, True
        forward = Forward(self.wanted, caller, upstream_id, sealer, rewrite, message.method, message.id if message.kind == "request" else None,
                          v2=v2, parsed=self._parsed(message, body, task_ids), rewrite_every=every)
        response = await relay(request, self.backend.connector, body, forward)
        if forward.seen is not None:  # for the observer, which the session relay is not handed (`Call.seen` on the modern wire)
            request[SEEN] = forward.seen
        return response

    async def _declares_held_tasks(self) -> bool:
        """Whether a relayed v1 `initialize` declares the held tasks: holding is on for a v1 backend
        that offers no tasks (docs/behaviour.md §9; decision 151: one with tasks declares its own)."""
        held = self.parts.held
        return (held is not None and held.on and self.backend.dialect == "v1"
                and not (await self.backend.current()).offers_tool_tasks)

    def _parsed(self, message: jsonrpc.Message, body: bytes | None,
                task_ids: tuple[Rewrite, Rewrite] | None) -> dict[str, Any] | jsonrpc.Message | None:
        """The message a session's POST `body` holds (`session_body` made it), for a connector that
        takes it parsed (a stdio backend: `Endpoint.TAKES_PARSED`): the client's own, classified
        already, when the body is the client's; None for the other connectors."""
        if not self.backend.connector.TAKES_PARSED:
            return None
        if task_ids is None or body is None or not may_carry_ids(body):
            return message
        return task_ids[0](message.raw)

    @property
    def plain_task_ids(self) -> bool:
        """Whether a session begun now on this backend keeps the backend's own task ids (decision
        190): on a backend that checks its sessions' callers (HTTP), which binds its tasks to its
        sessions itself, unless configured `session_task_ids = "sealed"`; never on a stdio process,
        whose tasks the proxy confines to their session."""
        return self.backend.connector.KNOWS_CALLERS and self.backend.config.session_task_ids == "plain"

    def session_sealer(self, request: web.Request, plain_task_ids: bool) -> Callable[[str], str]:
        """How the session ids this backend hands out are shown to relayed clients: sealed with the
        backend's name, whatever the size of the fleet (inverse: `proxy.routing.Router.relayed_session`;
        docs/decisions.md §83), and `PLAIN_TASK_IDS` when the session's task ids pass unchanged
        (decision 190), for no principal (""): the backend checks its sessions' callers
        (decision 25); for the principal of `request` when it cannot (a stdio process,
        `Endpoint.KNOWS_CALLERS`, decision 138), so that no other caller's request reaches the session."""
        name = self.backend.name
        principal = self._binding(request)
        fields = (PLAIN_TASK_IDS,) if plain_task_ids else ()
        return lambda session_id: self.keyring.seal(RELAY_SESSION, (name, session_id, *fields), principal)

    def _binding(self, request: web.Request) -> str:
        """Whom a relayed session of this backend is bound to: no one ("") where the backend checks
        its sessions' callers, else the principal of `request` (decision 138)."""
        if self.backend.connector.KNOWS_CALLERS:
            return ""
        return self.keyring.principal(request.headers.get(self.settings.identity_header_name))

    def session_task_ids(self, upstream: UpstreamSession) -> tuple[Rewrite, Rewrite] | None:
        """How task ids travel on a session relayed to this backend
        (upstream session `upstream_id`): (toward the backend, toward the client), each applied to a
        whole JSON-RPC message (`translators.fleet_ids`). Toward the client a backend's task id is
        sealed with the backend and the session (principal "", like the session id: decision 25);
        toward the backend only ids sealed for this very session open, others are "Unknown task"
        (`McpError(-32602)`). None before the session exists (`initialize`, which carries no task
        ids), for a plain session id from before (docs/decisions.md §83) and for a session whose task
        ids are plain (`plain_task_ids`, decision 190): ids pass through unchanged."""
        upstream_id = upstream.id
        if upstream_id is None or upstream.plain_task_ids:
            return None
        name = self.backend.name

        def seal(task_id: str) -> str:
            return self.keyring.seal_task_id(TaskRef(name, upstream_id, task_id), "")

        def unseal(task_id: str) -> str:
            ref = self.keyring.unseal_task_id(task_id, "")
            if (ref.backend, ref.session) != (name, upstream_id):
                # Another session's id says no more than a forged one (docs/decisions.md §86).
                raise unknown_task(NOT_ISSUED)
            return ref.task

        def unchanged(value: str) -> str:
            return value

        def to_backend(message: dict[str, Any]) -> dict[str, Any]:
            params = message.get("params")
            if isinstance(params, dict) and "taskId" in params and not isinstance(params["taskId"], str):
                self.keyring.unseal_task_id(params["taskId"], "")  # raises: not an id the proxy issued
            return ids_to_backend(message, unseal, unchanged)

        return to_backend, lambda message: ids_to_client(message, seal, unchanged)
