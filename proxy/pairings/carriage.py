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
  backend's own over a v2 backend).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from translators.differences import created_task_from_v2, created_task_result_v2, drop_task_param, inline_result_type
from translators.envelope import complete_result, session_meta, session_v2_result, strip_envelope
from translators.errors import INVALID_PARAMS, McpError
from translators.fleet_ids import ids_to_backend, ids_to_client
from translators.inputs import input_response_from_v1, strip_mrtr
from translators.model import InputRequest
from translators.protocol import H_NAME, MRTR_METHODS
from translators.results import initialize_result_v2_session
from translators.sealing import TaskRef

from ..faces.modern import ModernRequest, Reply
from ..faces.session import ProxySession, SessionReply
from ..upstream.modern_wire import ModernClient
from ..upstream.session_wire import SessionLost
from ..upstream.v2_session_wire import session_capabilities
from .mrtr import Exchange, Finished, input_rounds
from .parts import MemberParts
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
            raise McpError(INVALID_PARAMS, "Unknown task") from None
        except McpError as exc:
            if exc.code == INVALID_PARAMS:
                raise McpError(INVALID_PARAMS, "Unknown task") from None
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
        self.modern_pairing = V2OverV1(parts)
        self.modern = ModernClient(parts.backend.connector)

    async def initialize_result(self, _params: dict[str, Any]) -> dict[str, Any]:
        """`InitializeResult` without `protocolVersion`: the backend's capabilities with the tasks
        extension (v2 style, no `tasks` key)."""
        profile = await self.backend.current()
        return initialize_result_v2_session(profile.capabilities, profile.instructions, backend_dialect=profile.dialect,
                                            offers_tool_tasks=profile.offers_tool_tasks)

    async def dispatch(self, session: ProxySession, method: str, params: dict[str, Any], reply: SessionReply,
                       request: web.Request) -> dict[str, Any]:
        """The result of one request; input rounds go to the client on this POST's stream."""
        if method == "ping":
            return {}
        meta = session_meta(session.client_capabilities, session.client_info)
        headers = self.settings.upstream_headers(request.headers)
        profile = await self.backend.current()
        once: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
        if profile.dialect == "v1":
            async def once(p: dict[str, Any]) -> dict[str, Any]:
                call = ModernRequest(method, p, meta, session.principal, headers, reply.send)  # progress on the POST's stream
                return (await self.modern_pairing.answer(call)).result
        else:
            async def once(p: dict[str, Any]) -> dict[str, Any]:
                return await self.modern.request(method, p, meta, headers=headers)

        async def ask(input_request: InputRequest) -> dict[str, Any] | McpError:
            return input_response_from_v1(await reply.ask(input_request.method, input_request.params), input_request.method)

        result = await once(params)
        if method in MRTR_METHODS:
            result = await input_rounds(method, params, result, once, ask)
        return session_v2_result(method, result)
