"""SEP-2663 task semantics carried between the modern wire and a session (docs/behaviour.md §1
"v2-session", §3): both pairings where one side speaks v2 on the session wire.

* `V2OverV2Session`: a v2-modern client in front of a v2-session backend. The rules are those of
  `V2OverV1` except that the backend decides about tasks; the extension rides on the upstream
  session; its questions during a call become MRTR rounds; a created task's id is sealed with
  its session.
* `V2SessionCarriage`: a v2-session client (the tasks extension declared in `initialize`) in
  front of a v1 backend (the translation of `V2OverV1`) or a v2-modern backend (its own answers).
  The session's capabilities stand in for the per-request `_meta`, and where a modern client would
  get an MRTR `InputRequiredResult`, the session client gets server→client requests on the POST's
  stream (`mrtr.input_rounds`). Task ids are the modern pairing's (sealed over a v1 backend; the
  backend's own over a v2 backend). `logging/setLevel` is kept with the session and goes with each
  request as its `io.modelcontextprotocol/logLevel`; the log messages and progress of a request go
  to that request's POST stream (filtered at that level by the proxy too), and the session's GET
  stream gets list changes and resource updates (`session_push.SessionPush`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from translators.differences import created_task_from_v2, created_task_result_v2, drop_task_param, inline_result_type
from translators.envelope import ModernMeta, complete_result, session_meta, session_v2_result, strip_envelope
from translators.errors import FORGOTTEN, INVALID_PARAMS, McpError, unknown_task
from translators.fleet_ids import ids_to_backend, ids_to_client
from translators.inputs import input_response_from_v1, strip_mrtr
from translators.model import InputRequest
from translators.protocol import H_NAME, MRTR_METHODS
from translators.results import initialize_result_v2_session
from translators.sealing import TaskRef
from translators.streaming import request_notification, requested_log_level
from translators.subscriptions import subscriptions_after

from ..faces.modern import ModernRequest, Reply
from ..faces.session import ProxySession, SessionReply
from ..upstream.modern_wire import ModernClient
from ..upstream.session_wire import SessionLost, UpstreamSession
from ..upstream.v2_session_wire import session_capabilities
from .mrtr import Exchange, Finished, input_rounds
from .parts import MemberParts
from .session_push import SessionPush
from .v1_lists import SUBSCRIBED
from .v1_over_v2 import LOG_LEVEL
from .v2_over_v1 import V2OverV1


class V2OverV2Session(V2OverV1):
    """A v2-modern client in front of a v2-session backend."""

    def session_capabilities(self, call: ModernRequest) -> dict[str, Any]:
        return session_capabilities(call.meta)  # the extension rides on the session

    async def call_tool(self, call: ModernRequest) -> Reply:
        """`tools/call`: the backend decides; its questions during the call become MRTR rounds."""
        name = call.params.get("name")
        if not isinstance(name, str) or not name:
            raise McpError(INVALID_PARAMS, "tools/call needs params.name (a string)")
        if "requestState" in call.params:
            return await self._resume(call, name)
        params = strip_mrtr(drop_task_param(strip_envelope(call.params)))
        return await self._exchange(call, name, params, creates_task="v2-session")

    async def finish(self, call: ModernRequest, exchange: Exchange | Finished, answer: dict[str, Any]) -> Reply:
        """A created task's id sealed with the session that owns it; other results as they are."""
        if exchange.context == "v2-session" and answer.get("resultType") == "task":
            created = created_task_from_v2(answer)
            ref = TaskRef(self.backend.name, exchange.session.session_id or "", created.task_id)
            task_id = self.keyring.seal_task_id(ref, call.principal)
            return Reply(created_task_result_v2(created.evolve(task_id=task_id)), {H_NAME: task_id})
        return Reply(complete_result(exchange.method, answer, cache_ttl_ms=self.settings.cache_ttl_ms))

    async def task(self, call: ModernRequest, ref: TaskRef) -> Reply:
        """`tasks/get`, `tasks/update`, `tasks/cancel` on the session that owns the task; its id is
        the client's sealed one in the answer (`translators.fleet_ids`)."""
        sealed = call.params["taskId"]
        session = self.backend.pool.by_id(ref.session)
        request = ids_to_backend({"params": strip_envelope(call.params)}, lambda task: ref.task if task == sealed else task, _same)
        try:
            result = await session.request(call.method, request["params"], headers=call.upstream_headers)
        except SessionLost:
            raise unknown_task(FORGOTTEN) from None
        except McpError as exc:
            if exc.code == INVALID_PARAMS:
                raise unknown_task(FORGOTTEN) from None
            raise
        result = ids_to_client({"result": result}, lambda task: sealed if task == ref.task else task, _same)["result"]
        if call.method == "tasks/get":
            result = inline_result_type(result)
        return Reply(result if "resultType" in result else complete_result(call.method, result))


def _same(value: str) -> str:
    return value


class V2SessionCarriage:
    """What a v2-session client's requests mean, in front of a v1 or a v2-modern backend."""

    def __init__(self, parts: MemberParts):
        self.settings = parts.settings
        self.backend = parts.backend
        self.store = parts.follower.store
        self.modern_pairing = V2OverV1(parts)
        self.modern = ModernClient(parts.backend.connector, parts.backend.tool_headers)
        self.push = SessionPush(parts.backend, self.modern, self._meta, parts.follower.inputs, self._upstream_session)
        """What the sessions' GET streams get while they are open (list changes, resource updates)."""

    async def initialize_result(self, _params: dict[str, Any]) -> dict[str, Any]:
        """`InitializeResult` without `protocolVersion`: the backend's capabilities with the tasks
        extension (v2 style, no `tasks` key), `logging`, `listChanged` and `subscribe` where the
        backend declares them (the proxy carries them)."""
        profile = await self.backend.current()
        held = self.modern_pairing.parts.held
        return initialize_result_v2_session(profile.capabilities, profile.instructions, backend_dialect=profile.dialect,
                                            offers_tool_tasks=profile.offers_tool_tasks,
                                            holds_tasks=held is not None and held.on and profile.dialect == "v1")

    def _meta(self, session: ProxySession) -> ModernMeta:
        return session_meta(session.client_capabilities, session.client_info, session.state.get(LOG_LEVEL))

    def _call(self, session: ProxySession, method: str, params: dict[str, Any], headers: dict[str, str],
              notify: Callable[[dict[str, Any]], Awaitable[None]] | None = None) -> ModernRequest:
        return ModernRequest(method, params, self._meta(session), session.principal, headers).streamed(notify)

    async def _upstream_session(self, session: ProxySession, headers: dict[str, str]) -> UpstreamSession:
        """The pooled upstream session the session's requests go on (a v1 backend, §4.1)."""
        return await self.modern_pairing._session(self._call(session, "ping", {}, headers))

    def get_stream_opened(self, session: ProxySession, request: web.Request, ended: asyncio.Event) -> None:
        """The session opened its GET stream, which lasts until `ended`: list changes and resource
        updates go there (`proxy/faces/session.py`)."""
        self.push.watch(session, self.settings.upstream_headers(request.headers), ended)

    async def _keep(self, session: ProxySession) -> None:
        """Write the session with its changed state to the store (a restart, or another replica, reads it there)."""
        await self.store.keep_session(session.record(), self.settings.session_idle_ms / 1000)

    async def dispatch(self, session: ProxySession, method: str, params: dict[str, Any], reply: SessionReply,
                       request: web.Request) -> dict[str, Any]:
        """The result of one request; input rounds, progress and log messages go to the client on
        this POST's stream."""
        if method == "ping":
            return {}
        if method == "logging/setLevel":
            session.state[LOG_LEVEL] = requested_log_level(params)
            await self._keep(session)
            return {}
        headers = self.settings.upstream_headers(request.headers)
        profile = await self.backend.current()
        subscription = method in ("resources/subscribe", "resources/unsubscribe") and self.push.offers_subscriptions()
        if subscription:
            session.state[SUBSCRIBED] = subscriptions_after(session.state.get(SUBSCRIBED), method, params)
            await self._keep(session)
            if profile.dialect == "v2-modern" or method == "resources/unsubscribe":
                # v2-modern: the session's listen carries them; v1: the upstream session is shared
                # by the principal's sessions, so a URI stays subscribed there (docs/decisions.md §67).
                await self.push.changed(session)
                return {}
        await self.push.ready(session)  # a change this request causes is heard on the GET stream
        level = session.state.get(LOG_LEVEL)

        async def streamed(message: dict[str, Any]) -> None:
            """A notification on this request's own upstream answer stream (docs/behaviour.md §4.10)."""
            out = request_notification(message, level)
            if out is not None and reply.can_stream:
                with contextlib.suppress(ConnectionError):  # the client went away; its request is cancelled with it
                    await reply.send(out)

        once: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
        if profile.dialect == "v1":
            async def once(p: dict[str, Any]) -> dict[str, Any]:
                return (await self.modern_pairing.answer(self._call(session, method, p, headers, streamed))).result
        else:
            async def once(p: dict[str, Any]) -> dict[str, Any]:
                return await self.modern.request(method, p, self._meta(session), headers=headers, on_notification=streamed)

        async def ask(input_request: InputRequest) -> dict[str, Any] | McpError:
            return input_response_from_v1(await reply.ask(input_request.method, input_request.params), input_request.method)

        result = await once(params)
        if method in MRTR_METHODS:
            result = await input_rounds(method, params, result, once, ask)
        return session_v2_result(method, result)
