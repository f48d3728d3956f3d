"""v2-session clients (the tasks extension declared in `initialize`): SEP-2663 task semantics on
the session wire (docs/behaviour.md §1 "v2-session", §3).

The v2 rules are those of the modern face: in front of a v1 backend the same translation
(`ModernFace.dispatch`), in front of a v2-modern backend the backend's own answers. Only the
carriage differs: the session's capabilities stand in for the per-request `_meta`, and where a
modern client would get an MRTR `InputRequiredResult`, a session client gets server→client requests
on the POST's stream (the session wire allows them), after which the proxy retries with the answers.
Task ids are the modern face's (sealed over a v1 backend; the backend's own over a v2 backend).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from aiohttp import web

from translators.capabilities import server_capabilities_to_v2
from translators.envelope import ModernMeta, session_v2_result, upstream_client_capabilities
from translators.errors import INTERNAL_ERROR, McpError
from translators.inputs import input_response_from_v1
from translators.model import InputRequest
from translators.protocol import MODERN_VERSION, MRTR_METHODS, TASKS_EXTENSION

from ..upstream.backend import Backend
from ..config import Settings
from ..faces.modern import SERVER_INFO, Call, ModernFace
from ..faces.session import PostReply, ProxySession
from ..upstream.modern_wire import ModernClient

MAX_ROUNDS = 16
"""Most input rounds one request may take before the proxy gives up on it."""


class V2SessionRules:
    """What a v2-session client's requests mean, in front of a v1 or a v2-modern backend."""

    def __init__(self, settings: Settings, backend: Backend, modern_face: ModernFace):
        self.settings = settings
        self.backend = backend
        self.modern_face = modern_face
        self.modern = ModernClient(backend.connector)

    async def initialize_result(self, _params: dict[str, Any]) -> dict[str, Any]:
        """`InitializeResult` without `protocolVersion`: the backend's capabilities with the tasks
        extension (v2 style, no `tasks` key)."""
        profile = await self.backend.current()
        capabilities = server_capabilities_to_v2(profile.capabilities)
        if profile.dialect == "v2-modern" and profile.offers_tool_tasks:
            capabilities["extensions"] = {TASKS_EXTENSION: {}}
        result: dict[str, Any] = {"capabilities": capabilities, "serverInfo": SERVER_INFO}
        if profile.instructions:
            result["instructions"] = profile.instructions
        return result

    async def dispatch(self, session: ProxySession, method: str, params: dict[str, Any], reply: PostReply,
                       request: web.Request) -> dict[str, Any]:
        """The result of one request; input rounds go to the client on this POST's stream."""
        if method == "ping":
            return {}
        meta = ModernMeta(MODERN_VERSION, {**upstream_client_capabilities(session.client_capabilities),
                                           "extensions": {TASKS_EXTENSION: {}}}, session.client_info)
        headers = self.settings.upstream_headers(request.headers)
        profile = await self.backend.current()
        once: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
        if profile.dialect == "v1":
            async def once(p: dict[str, Any]) -> dict[str, Any]:
                return (await self.modern_face.dispatch(Call(method, p, meta, session.principal, headers))).result
        else:
            async def once(p: dict[str, Any]) -> dict[str, Any]:
                return await self.modern.request(method, p, meta, headers=headers)
        result = await once(params)
        rounds = 0
        while method in MRTR_METHODS and result.get("resultType") == "input_required":
            rounds += 1
            if rounds > MAX_ROUNDS:
                raise McpError(INTERNAL_ERROR, f"{method} asked for input more than {MAX_ROUNDS} times")
            answers: dict[str, Any] = {}
            for key, raw in (result.get("inputRequests") or {}).items():
                input_request = InputRequest.model_validate(raw)
                answer = input_response_from_v1(await reply.ask(input_request.method, input_request.params), input_request.method)
                if isinstance(answer, McpError):
                    raise answer
                answers[key] = answer
            retry = {**params, "inputResponses": answers}
            if "requestState" in result:
                retry["requestState"] = result["requestState"]
            result = await once(retry)
        return session_v2_result(method, result)
