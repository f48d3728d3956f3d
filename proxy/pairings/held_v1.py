"""Held tasks for v1 clients on a session relayed to a v1 backend (docs/behaviour.md §9 "v1 and
v2-session clients"; the core is `proxy/pairings/held.py`).

A relayed session passes the backend's bytes on (`relay.py`); while holding is on, the entry asks
`HeldSessions.intercept` first, which answers these requests itself (None: relay as before):

* `tools/list`: the backend's list, each tool the proxy holds shown `execution.taskSupport:
  "optional"` (`translators.held.tools_list_held_v1`): every tool of a backend that offers no tasks,
  and of a backend with tasks only the `forbidden` ones named in `hold_tools` (decision 151): a
  backend with tasks keeps every other declaration it made, and the relayed `initialize` of a backend
  without tasks declares the held ones (`Relay.session`);
* `tools/call` with `params.task` to such a tool: the plain call goes upstream on the client's own
  upstream session and the client gets a held task at once (`CreateTaskResult`, `ttl`,
  `pollInterval`);
* `tasks/get`, `tasks/result` (blocking; the backend's questions go out on its stream as the
  backend's own requests, same id, with related-task `_meta`), `tasks/cancel` of a held task, and
  `tasks/list` in front of a backend without tasks (the session's held tasks);
* the client's JSON-RPC answer to such a question, delivered upstream by the process holding the
  call (elsewhere it is relayed: the same session and request id reach the backend).

Held tasks of a relayed session belong to that session (the backend's own tasks would too:
docs/decisions.md §25): their owner is `session:<upstream session id>`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

from aiohttp import web

from translators import jsonrpc
from translators.differences import drop_task_param
from translators.errors import INTERNAL_ERROR, INVALID_PARAMS, NOT_ISSUED, McpError, unknown_task
from translators.held import HELD_SESSION, cancelled_v1, created_v1, get_v1, list_v1, result_v1, tools_list_held_v1
from translators.inputs import input_request_to_v1
from translators.model import InputRequest
from translators.tool_results import of_message

from ..faces.call import SEEN
from ..faces.checks import json_response, stream_to
from ..sse import sse_frame
from ..upstream.session_wire import SessionLost
from .held import POLL_MS, HeldCalls

_MAY_CONCERN_HELD = frozenset({"tools/list", "tasks/list", "tasks/get", "tasks/result", "tasks/cancel"})
"""Requests `intercept` looks at (with a `tools/call` that asks for a task)."""


class HeldSessions:
    """The v1 face of one backend's held calls (module docstring)."""

    def __init__(self, held: HeldCalls, settings: Any, keyring: Any):
        self.held = held
        self.backend = held.backend
        self.settings = settings
        self.keyring = keyring

    @staticmethod
    def owner(upstream_id: str) -> str:
        return "session:" + upstream_id

    def _held_ref(self, task_id: Any, owner: str) -> str | None:
        """The held id inside a client's task id, or None when it names no held task of `owner`."""
        ref = self.keyring.opened_task_id(task_id, owner)  # not raising: most ids are relayed tasks' (decision 143)
        return ref.task if ref is not None and (ref.backend, ref.session) == (self.backend.name, HELD_SESSION) else None

    def intercept(self, request: web.Request, message: jsonrpc.Message,
                  upstream_id: str | None) -> Coroutine[Any, Any, web.StreamResponse | None] | None:
        """What answers `message` on a relayed v1 session when it may concern held tasks (a
        coroutine, whose None says: relay it after all); None: relay it. (A plain function: a
        `tools/call` without `params.task`, most of a session's requests, costs no coroutine.)"""
        if not self.held.on or upstream_id is None or self.backend.dialect != "v1":
            return None
        if message.kind == "request" and message.method not in _MAY_CONCERN_HELD and not (
                message.method == "tools/call" and isinstance(message.params.get("task"), dict)):
            return None
        if message.kind != "request" and message.kind != "response":
            return None
        return self._intercept(request, message, upstream_id)

    async def _intercept(self, request: web.Request, message: jsonrpc.Message, upstream_id: str) -> web.StreamResponse | None:
        owner = self.owner(upstream_id)
        if message.kind == "response":
            return await self._answer(message, owner)
        if message.kind != "request":
            return None
        params = message.params
        try:
            if message.method == "tools/list":
                held = self.held.held_tools((await self.backend.current()).offers_tool_tasks)
                return None if held == frozenset() else await self._tools_list(request, message, upstream_id, held)
            if message.method == "tools/call" and isinstance(params.get("task"), dict):
                return await self._call(request, message, upstream_id, owner)
            if message.method == "tasks/list" and not (await self.backend.current()).offers_tool_tasks:
                return json_response(jsonrpc.result_response(message.id, await self._list(params.get("cursor"), owner)))
            if message.method in ("tasks/get", "tasks/result", "tasks/cancel"):
                held_id = self._held_ref(params.get("taskId"), owner)
                if held_id is None:
                    if not (self.backend.fresh() or await self.backend.current()).offers_tool_tasks:  # no await on the hot path
                        # The tasks are the proxy's declaration, not the backend's: an id that is no
                        # held task of this session is unknown here, on a session whose task ids are
                        # the backend's own too (decision 190), and never reaches the backend.
                        raise unknown_task(NOT_ISSUED)
                    return None
                return await self._task(request, message, held_id, owner)
        except McpError as exc:
            return json_response(jsonrpc.error_response(message.id, exc))
        return None

    async def _list(self, cursor: Any, owner: str) -> dict[str, Any]:
        """The session's held tasks, oldest first, in pages of `list_page_size`; `cursor` a sealed
        token bound to the session, one that does not unseal `-32602` "Invalid cursor" (as the
        translated pairing's, docs/behaviour.md §5.5)."""
        start = 0
        if cursor is not None:
            try:
                start = int(self.keyring.unseal("cursor", str(cursor), owner)[0])
            except ValueError:
                raise McpError(INVALID_PARAMS, "Invalid cursor") from None
        records = await self.held.store.of_principal(self.backend.name, owner)
        size = self.settings.list_page_size
        states = [replace((await self.held.read(r.task_id, owner)).state, task_id=self.held.sealed(r.task_id, owner))
                  for r in records[start:start + size]]
        more = start + size < len(records)
        return list_v1(states, self.keyring.seal("cursor", (str(start + size), ""), owner) if more else None)

    async def _tools_list(self, request: web.Request, message: jsonrpc.Message, upstream_id: str,
                          held: frozenset[str] | None) -> web.Response | None:
        """The backend's `tools/list` on the client's session, the `held` tools shown with task
        support (`HeldCalls.held_tools`); when it does not answer a
        list (a session it forgot, an error, unreachable) the request is relayed as before, so the
        client gets the backend's own answer (a 404 included)."""
        session = self.backend.pool.by_id(upstream_id)
        try:
            result = await session.request("tools/list", message.params, headers=self.settings.upstream_headers(request.headers))
        except (SessionLost, McpError):
            return None
        return json_response(jsonrpc.result_response(message.id, tools_list_held_v1(result, held)))

    async def _call(self, request: web.Request, message: jsonrpc.Message, upstream_id: str, owner: str) -> web.Response | None:
        """`params.task` on a tool the backend offers no task for: a held task at once."""
        name = message.params.get("name")
        if not isinstance(name, str):
            return None
        profile = await self.backend.current()
        support = await self.backend.tool_support(name) if profile.offers_tool_tasks else "forbidden"
        if not self.held.holds(name, support or "forbidden", profile.offers_tool_tasks) or self.backend.unreachable_at is not None:
            return None  # the backend answers it as it declared it (decision 151), or refuses connections now: relayed
        if not self.held.has_room(owner):
            raise McpError(INTERNAL_ERROR, f"Too many held calls (at most {self.held.max_calls}, {self.held.max_per_principal} "
                                           "per principal): try again later")
        task = message.params.get("task") or {}
        ttl = task.get("ttl") if isinstance(task.get("ttl"), int) and not isinstance(task.get("ttl"), bool) else None
        headers = self.settings.upstream_headers(request.headers)
        exchange = self.held.start(owner, name, drop_task_param(message.params), self.backend.pool.by_id(upstream_id), headers)
        holding = await self.held.promote(exchange, owner, name, ttl_ms=ttl, at_once=True)
        assert holding is not None  # room was checked just now, with no await between
        sealed = self.held.sealed(holding.record.task_id, owner)
        return json_response(_seen(request, "tools/call", jsonrpc.result_response(message.id, created_v1(replace(holding.state, task_id=sealed)))))

    async def _task(self, request: web.Request, message: jsonrpc.Message, held_id: str, owner: str) -> web.StreamResponse:
        sealed = message.params["taskId"]
        record = await self.held.read(held_id, owner)
        if message.method == "tasks/get":
            return json_response(_seen(request, "tasks/get", jsonrpc.result_response(message.id, get_v1(replace(record.state, task_id=sealed)))))
        if message.method == "tasks/cancel":
            if record.state.terminal:
                raise McpError(INVALID_PARAMS, f"Cannot cancel task {sealed}: it is already {record.state.status}")
            await self.held.cancel(record)
            record = await self.held.read(held_id, owner)
            return json_response(jsonrpc.result_response(message.id, cancelled_v1(replace(record.state, task_id=sealed))))
        return await self._result(request, message, held_id, owner, sealed)

    async def _result(self, request: web.Request, message: jsonrpc.Message, held_id: str, owner: str, sealed: str) -> web.StreamResponse:
        """A blocking `tasks/result`: the backend's questions on its stream, then the payload."""
        stream: web.StreamResponse | None = None
        sent: set[str] = set()
        event = 0
        while True:
            holding = self.held.holding(held_id)
            if holding is not None:
                holding.changed.clear()
            record = await self.held.read(held_id, owner)
            if record.state.terminal:
                payload = result_v1(replace(record.state, task_id=sealed))
                answer = _seen(request, "tasks/result", jsonrpc.error_response(message.id, payload) if isinstance(payload, McpError)
                               else jsonrpc.result_response(message.id, payload))
                if stream is None:
                    return json_response(answer)
                event += 1
                await stream.write(sse_frame(event, answer))
                await stream.write_eof()
                return stream
            if holding is not None:
                questions = [(key, upstream_id, question) for key, (upstream_id, question) in holding.exchange.outstanding.items()]
            else:  # held by another process: its record names the questions
                questions = [(key, record.questions[key], InputRequest.model_validate(wire))
                             for key, wire in record.state.input_requests.items() if key in record.questions]
            for key, upstream_id, question in questions:
                if key in sent:
                    continue
                if stream is None:
                    stream = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
                    await stream_to(request, stream)
                event += 1
                await stream.write(sse_frame(event, input_request_to_v1(question, upstream_id, sealed)))
                sent.add(key)
            if holding is None:
                await asyncio.sleep(POLL_MS / 2000)  # read the record again
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(holding.changed.wait(), POLL_MS / 1000)

    async def _answer(self, message: jsonrpc.Message, owner: str) -> web.Response | None:
        """The client's answer to a question of a call held here: delivered upstream."""
        raw = message.raw
        if "result" not in raw:
            return None  # an error answer is relayed (same session, same id)
        for holding in self.held.holdings():
            if holding.record.principal != owner:
                continue
            for key, (upstream_id, _) in list(holding.exchange.outstanding.items()):
                if upstream_id == raw.get("id"):
                    await self.held.answer(holding.record, {key: raw["result"]})
                    return web.Response(status=202)
        if self.held.handover is not None:  # a call another replica holds: handed to it
            for record in await self.held.store.of_principal(self.backend.name, owner):
                for key, upstream_id in record.questions.items():
                    if upstream_id == raw.get("id") and not record.state.terminal:
                        await self.held.answer(record, {key: raw["result"]})
                        return web.Response(status=202)
        return None


def _seen(request: web.Request, method: str, answer: dict[str, Any]) -> dict[str, Any]:
    """`answer` (to `method`), its tool outcome left for the observer (`SEEN`)."""
    request[SEEN] = of_message(method, answer, v1=True)
    return answer
