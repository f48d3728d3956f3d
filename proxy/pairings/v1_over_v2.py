"""v1 clients in front of a v2-modern backend (docs/behaviour.md §5): what each request means.

The session face (`proxy/faces/session.py`) does the HTTP; this module decides. Every upstream request
declares the tasks extension and the v1 client's elicitation, sampling and roots capabilities.
Tasks created for a v1 client are recorded in the `TaskRegistry` (listing, sticky cancels, asked
input keys, tasks the proxy holds itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from translators import jsonrpc
from translators.differences import (
    V1Payload,
    add_related_task,
    cancel_answer_v1,
    created_task_from_v2,
    created_task_result_v1,
    drop_task_param,
    get_task_result_v1,
    outcome_to_v1,
    task_from_get_result_v2,
    with_client_outcome,
)
from translators.envelope import ModernMeta, legacy_result, session_meta
from translators.errors import (
    ELSEWHERE,
    FORGOTTEN,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    McpError,
    unknown_task,
)
from translators.inputs import input_request_to_v1, input_response_from_v1
from translators.model import CanonicalTask, InputRequest, TaskError
from translators.protocol import TERMINAL_STATUSES
from translators.results import initialize_result_v1, task_status_notification_v1, tasks_list_result_v1, tools_list_to_v1
from translators.sealing import TaskRef
from translators.streaming import request_notification, requested_log_level
from translators.subscriptions import subscriptions_after

from ..faces.session import ProxySession, SessionReply
from ..state.client_tasks import HELD, Entry, TaskRegistry
from ..upstream.endpoint import read_again
from ..upstream.modern_wire import ModernClient
from .mrtr import input_rounds
from .parts import MemberParts
from .v1_lists import SUBSCRIBED, ListPush
from .v1_own_session import LOG_LEVEL, OwnClient, OwnSessions
from .v1_task_push import TaskPush, poll_delay

log = logging.getLogger(__name__)

__all__ = ["LOG_LEVEL", "V1OverV2"]


def _now_iso() -> str:
    """Now, as ISO 8601 UTC with microseconds (the precision backends use)."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


class V1OverV2:
    """The rules of §5 for one v2 backend (v2-modern, or v2-session: each v1 session on an upstream
    session of its own, `v1_own_session`)."""

    def __init__(self, parts: MemberParts):
        self.settings = settings = parts.settings
        self.keyring = parts.keyring
        self.backend = backend = parts.backend
        self.modern = ModernClient(backend.connector, backend.tool_headers)
        self.registry = TaskRegistry(max_tasks=settings.max_tasks, max_task_state_ms=settings.max_task_state_ms,
                                     store=parts.follower.store, backend=backend.name)
        backend.metrics.track_live(self.registry.unfinished, backend.name)
        self.push = TaskPush(self.registry, backend, functools.partial(_Call, self))
        """Followers of the sessions' tasks while their GET streams are open (§5.7, §5.8)."""
        self.lists = ListPush(backend, self.modern, self._meta)
        """The sessions' upstream listens while their GET streams are open (§5.9)."""
        self.own = OwnSessions(backend, self._meta, max_sessions=settings.max_sessions)
        """In front of a v2-session backend: each session's own upstream session, and its GET stream (§5.9)."""
        self.store = parts.follower.store

    def get_stream_opened(self, session: ProxySession, request: web.Request, ended: asyncio.Event) -> None:
        """The session opened its GET stream, which lasts until `ended`: follow its open tasks and
        the backend's list changes there (`proxy/faces/session.py`)."""
        headers = self._headers(request)
        self.push.watch(session, headers)
        self.lists.watch(session, headers, ended)
        self.own.watch(session, headers, ended)

    # -- session start -----------------------------------------------------------------------------

    async def initialize_result(self, _params: Mapping[str, Any]) -> dict[str, Any]:
        """The proxy's own `InitializeResult` (docs/behaviour.md §5.1), without `protocolVersion`."""
        profile = await self.backend.current()
        if profile.dialect not in ("v2-modern", "v2-session"):
            raise McpError(INVALID_REQUEST, f"Session-wire clients in front of a {profile.dialect} backend are served in a later "
                           "version of mcp-tasks-proxy; use the 2026-07-28 wire", http_status=400)
        return initialize_result_v1(profile.capabilities, profile.instructions, listens=True)

    def _meta(self, session: ProxySession) -> ModernMeta:
        return session_meta(session.client_capabilities, session.client_info, session.state.get(LOG_LEVEL))

    async def _keep(self, session: ProxySession) -> None:
        """Write the session with its changed state to the store (a restart, or another replica, reads it there)."""
        await self.store.keep_session(session.record(), self.settings.session_idle_ms / 1000)

    async def _subscription(self, session: ProxySession, method: str, params: dict[str, Any],
                            call: _Call | None = None) -> dict[str, Any]:
        """`resources/subscribe` or `resources/unsubscribe` in front of a backend that offers resource
        subscriptions: the session's URIs change, and, on `subscriptions/listen`, its listen, if it
        holds one, is opened again with them before the answer; in front of a v2-session backend
        (`call` given) the request goes to the session's own upstream session first (§5.9)."""
        uris = subscriptions_after(session.state.get(SUBSCRIBED), method, params)
        if call is not None:
            await call.upstream(method, {"uri": params["uri"]})
        session.state[SUBSCRIBED] = uris
        await self._keep(session)
        if call is None:
            self.lists.renew(session)
            await self.lists.ready(session)
        return {}

    def _headers(self, request: web.Request) -> dict[str, str]:
        return self.settings.upstream_headers(request.headers)

    # -- dispatch ------------------------------------------------------------------------------------

    async def dispatch(self, session: ProxySession, method: str, params: dict[str, Any], reply: SessionReply,
                       request: web.Request) -> dict[str, Any]:
        """The result of one v1 request. Raises `McpError` (mapped for v1 clients by the face)."""
        profile = await self.backend.current()
        if method == "ping":
            return {}
        own = profile.dialect == "v2-session"
        if method == "logging/setLevel":
            level = requested_log_level(params)
            if own and self.own.logs():  # session state upstream too (§5.1)
                await _Call(self, session, reply, self._headers(request), "v2-session").upstream(method, params)
            session.state[LOG_LEVEL] = level
            await self._keep(session)
            return {}
        if method in ("resources/subscribe", "resources/unsubscribe"):
            if self.lists.offered(resources=True):
                return await self._subscription(session, method, params)
            if own and self.own.subscribes():
                return await self._subscription(session, method, params, _Call(self, session, reply, self._headers(request), "v2-session"))
        # What goes upstream: a change it causes is heard on the GET stream (§5.9).
        await self.lists.ready(session)
        await self.own.ready(session)
        call = _Call(self, session, reply, self._headers(request), profile.dialect)
        if method == "tools/call":
            result = await call.tool(params)
            if "task" in result:
                self.push.watch(session, call.headers)
            return result
        if method == "tasks/get":
            return await call.get(params)
        if method == "tasks/result":
            return await call.result(params)
        if method == "tasks/list":
            return await call.list(params)
        if method == "tasks/cancel":
            return await call.cancel(params)
        if method == "tools/list":
            result = legacy_result(method, await call.upstream(method, params))
            if not own:
                self.backend.tool_headers.heard(result)  # the annotations its tools/call will need (§6)
            profile = self.backend.profile
            return tools_list_to_v1(result, profile.tools if profile is not None else {}, self.settings.advertise_task_support)
        if method in ("prompts/get", "resources/read"):
            return legacy_result(method, await call.with_input(method, params))
        return legacy_result(method, await call.upstream(method, params))


class _Call:
    """One v1 request in flight."""

    def __init__(self, rules: V1OverV2, session: ProxySession, reply: SessionReply, headers: dict[str, str], dialect: str):
        self.rules = rules
        self.session = session
        self.reply = reply
        self.headers = headers
        self.meta = rules._meta(session)
        self.upstream_client: Any = rules.modern
        if dialect == "v2-session":
            # Session-wire backend: the session's own upstream session; its questions during a call
            # are put to the v1 client on this POST's stream.
            self.upstream_client = rules.own.client(session, self._relay_question)

    async def _relay_question(self, message: dict[str, Any]) -> dict[str, Any]:
        answer = await self.reply.ask(str(message.get("method")), dict(message.get("params") or {}))
        return jsonrpc.response_carrying(message.get("id"), answer)

    async def upstream(self, method: str, params: dict[str, Any], entry: Entry | None = None) -> dict[str, Any]:
        """One request upstream; `entry`: about that task (on the upstream session that holds it)."""
        return await self._on_task(entry).request(method, params, self.meta, headers=self.headers, on_notification=self._notified)

    def _on_task(self, entry: Entry | None) -> Any:
        """The client a request about `entry`'s task goes through: on the upstream session sealed in its id (v2-session)."""
        client = self.upstream_client
        if entry is not None and entry.ref.session and isinstance(client, OwnClient):
            return client.on_task(entry.ref.session)
        return client

    async def _notified(self, message: dict[str, Any]) -> None:
        """A notification on the answer stream of this call's upstream request: progress, and log
        messages at or above the session's level, go on this POST's stream (§5.1); anything else,
        or anything while no stream can be opened to the client, is dropped."""
        out = request_notification(message, self.session.state.get(LOG_LEVEL))
        if out is not None and getattr(self.reply, "can_stream", False):
            with contextlib.suppress(ConnectionError):  # the client went away; its request is cancelled with it
                await self.reply.send(out)

    async def ask(self, request: InputRequest, task_id: str | None) -> dict[str, Any] | McpError:
        """Put one input request to the v1 client (related-task `_meta` when in a task)."""
        message = input_request_to_v1(request, "", task_id)
        answer = await self.reply.ask(message["method"], message["params"])
        return input_response_from_v1(answer, request.method)

    async def with_input(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A request whose MRTR rounds are turned into requests to the client on this POST's
        stream, each round retried upstream with `inputResponses` and the same `requestState`."""
        async def ask(request: InputRequest) -> dict[str, Any] | McpError:
            return await self.ask(request, None)

        return await input_rounds(method, params, await self.upstream(method, params), functools.partial(self.upstream, method), ask)

    # -- tools/call (§5.2) ------------------------------------------------------------------------------

    async def tool(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        if not isinstance(name, str):
            raise McpError(INVALID_PARAMS, "tools/call needs params.name (a string)")
        wants_task = isinstance(params.get("task"), dict)
        support = (await self.rules.backend.current()).tools.get(name, self.rules.settings.advertise_task_support)
        if wants_task and support == "forbidden":
            raise McpError(METHOD_NOT_FOUND, f"Tool {name!r} does not support task-augmented invocation")
        result = await self.with_input("tools/call", drop_task_param(params))
        if result.get("resultType") == "task":
            created = created_task_from_v2(result)
            if created.dropped:
                self.rules.backend.metrics.dropped(created.dropped, "a v2 CreateTaskResult")
            owner = self.upstream_client.session_id if isinstance(self.upstream_client, OwnClient) else ""
            ref = TaskRef(self.rules.backend.name, owner, created.task_id)
            if not wants_task:
                return await self.wait(ref, created)
            task_id = self.rules.keyring.seal_task_id(ref, self.session.principal)
            await self.rules.registry.add(task_id, ref, self.session.principal, self.session.id, created.evolve(task_id=task_id))
            return created_task_result_v1(created.evolve(task_id=task_id))
        plain = legacy_result("tools/call", result)
        if not wants_task:
            return plain
        return await self.hold(plain, params["task"].get("ttl"))

    async def hold(self, result: dict[str, Any], ttl: Any) -> dict[str, Any]:
        """A task the proxy holds itself, carrying a plain result (§5.2); the client's ttl is
        honoured (positive integer milliseconds, at most `max_task_state_ms`)."""
        cap = self.rules.settings.max_task_state_ms
        ttl_ms = ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and 0 < ttl <= cap else cap
        ref = TaskRef(self.rules.backend.name, HELD, secrets.token_urlsafe(12))
        task_id = self.rules.keyring.seal_task_id(ref, self.session.principal)
        now = _now_iso()
        task = CanonicalTask(task_id=task_id, status="completed", created_at=now, last_updated_at=now, ttl_ms=ttl_ms, result=result)
        await self.rules.registry.add(task_id, ref, self.session.principal, self.session.id, task, held_ttl_ms=ttl_ms)
        return created_task_result_v1(task)

    async def wait(self, ref: TaskRef, created: CanonicalTask) -> dict[str, Any]:
        """A plain v1 call whose tool the backend ran as a task: wait, forwarding input requests,
        and answer the final result, or the final error as a JSON-RPC error."""
        entry = Entry("", ref, "", 0, created, self.session.id)
        task = await self.until_terminal(entry, None)
        status_only, payload = outcome_to_v1(task)
        if payload is not None and payload.kind == "error":
            raise McpError(payload.body["code"], payload.body["message"], payload.body.get("data"))  # type: ignore[index]
        if task.status == "cancelled":
            raise McpError(INTERNAL_ERROR, "Task was cancelled")
        return payload.body if payload is not None and payload.body is not None else {}

    # -- following a task --------------------------------------------------------------------------------

    async def entry(self, params: dict[str, Any]) -> Entry:
        """The caller's task named by `params.taskId`. Raises -32602 when unknown/forged/foreign."""
        task_id = params.get("taskId")
        ref = self.rules.keyring.unseal_task_id(task_id, self.session.principal)
        entry = await self.rules.registry.get(task_id)  # type: ignore[arg-type]
        if entry is None:
            if ref.session == HELD or ref.backend != self.rules.backend.name:
                raise unknown_task(ELSEWHERE if ref.backend != self.rules.backend.name else FORGOTTEN)
            # Known to the key but not to this process (a restart or another replica): adopt it.
            now = _now_iso()
            placeholder = CanonicalTask(task_id=task_id, status="working", created_at=now, last_updated_at=now)  # type: ignore[arg-type]
            entry = await self.rules.registry.add(task_id, ref, self.session.principal, self.session.id, placeholder)  # type: ignore[arg-type]
        return entry

    async def current(self, entry: Entry) -> CanonicalTask:
        """The task now (sealed id), with sticky cancels and proxy-made failures applied; a change of
        status is announced on the session's GET stream (§5.7)."""
        if entry.ref.session == HELD:
            return entry.last
        if entry.last.status in TERMINAL_STATUSES and entry.last.task_id == entry.task_id:
            task = entry.last
        else:
            try:
                # A read: asked again while the backend's answers break off or a gateway in front
                # of it answers 502/503/504, as on the modern face (docs/decisions.md §29).
                wire = await read_again(lambda: self.upstream("tasks/get", {"taskId": entry.ref.task}, entry))
            except McpError as exc:
                if exc.code == INVALID_PARAMS:
                    await self.rules.registry.remove(entry.task_id)
                    raise unknown_task(FORGOTTEN) from None
                raise
            task = task_from_get_result_v2(wire).evolve(task_id=entry.task_id or entry.ref.task)
            if task.dropped:
                self.rules.backend.metrics.dropped(task.dropped, "a v2 tasks/get answer")
        task = with_client_outcome(task, entry.failure, entry.cancelled)
        previous, entry.last = entry.last, task
        if entry.task_id and previous.status != task.status:
            await self.rules.registry.save(entry)
            await self.session.notify(task_status_notification_v1(get_task_result_v1(task)))
        return task

    async def until_terminal(self, entry: Entry, task_id: str | None) -> CanonicalTask:
        """Poll until the task ends, putting each input request not yet asked to the client once and
        sending its answer upstream with `tasks/update` (§5.4)."""
        while True:
            task = await self.current(entry)
            if task.terminal:
                return task
            answered = task.status == "input_required" and await self.ask_open(entry, task, task_id or entry.ref.task)
            if not answered:
                await asyncio.sleep(poll_delay(task.poll_interval_ms))

    async def ask_open(self, entry: Entry, task: CanonicalTask, task_id: str) -> bool:
        """Put each input request of `task` not yet asked (nor being asked) to the client once, on
        this call's stream, and send its answer upstream with `tasks/update`; whether any was."""
        answered = False
        for key, request in task.input_requests.items():
            if key in entry.asked or key in entry.asking:
                continue
            entry.asking.add(key)  # not kept in the store: a restart asks it again
            try:
                answer = await self.ask(request, task_id)
                if isinstance(answer, McpError):
                    await self._fail(entry, answer)
                    break
                await self._on_task(entry).request("tasks/update", {"taskId": entry.ref.task, "inputResponses": {key: answer}},
                                                   self.meta, headers=self.headers)
            finally:
                entry.asking.discard(key)  # not answered: asked again on a later tasks/result
            entry.asked.add(key)
            if entry.task_id:
                await self.rules.registry.save(entry)
            answered = True
        return answered

    async def _fail(self, entry: Entry, error: McpError) -> None:
        """A client error answer to a non-elicitation request: cancel the upstream task and end it
        `failed` with that error (§5.4)."""
        entry.failure = TaskError(code=error.code, message=error.message, data=error.data)
        entry.asked.update(entry.asking)
        if entry.task_id:
            await self.rules.registry.save(entry)
        try:
            await self._on_task(entry).request("tasks/cancel", {"taskId": entry.ref.task}, self.meta, headers=self.headers)
        except McpError as exc:
            log.info("cancelling a failed task upstream: %s", exc.message)

    # -- tasks/* (§5.3–§5.6) -------------------------------------------------------------------------------

    async def get(self, params: dict[str, Any]) -> dict[str, Any]:
        return get_task_result_v1(await self.current(await self.entry(params)))

    async def result(self, params: dict[str, Any]) -> dict[str, Any]:
        entry = await self.entry(params)
        waiting = self.rules.push.waiting
        waiting[entry.task_id] += 1  # its questions come on this stream, not the GET stream (§5.8)
        try:
            task = await self.until_terminal(entry, entry.task_id)
        finally:
            waiting[entry.task_id] -= 1
            if waiting[entry.task_id] <= 0:
                del waiting[entry.task_id]
        _, payload = outcome_to_v1(task)
        return _payload_answer(payload, entry.task_id)

    async def list(self, params: dict[str, Any]) -> dict[str, Any]:
        entries = await self.rules.registry.listing(self.session.principal, self.session.id)
        start = 0
        cursor = params.get("cursor")
        if cursor is not None:
            try:
                (offset, anchor) = self.rules.keyring.unseal("cursor", str(cursor), self.session.principal)
                start = int(offset)
            except ValueError:
                raise McpError(INVALID_PARAMS, "Invalid cursor") from None
        size = self.rules.settings.list_page_size
        page = entries[start : start + size]
        tasks = []
        for entry in page:
            task = entry.last
            if not task.terminal and entry.ref.session != HELD:
                try:
                    task = await self.current(entry)
                except McpError:
                    continue
            tasks.append(get_task_result_v1(task))
        more = start + size < len(entries)
        next_cursor = self.rules.keyring.seal("cursor", (str(start + size), ""), self.session.principal) if more else None
        return tasks_list_result_v1(tasks, next_cursor)

    async def cancel(self, params: dict[str, Any]) -> dict[str, Any]:
        entry = await self.entry(params)
        task = await self.current(entry)
        if task.terminal:
            raise McpError(INVALID_PARAMS, f"Cannot cancel task in terminal status: {task.status}")
        await self._on_task(entry).request("tasks/cancel", {"taskId": entry.ref.task}, self.meta, headers=self.headers)
        entry.cancelled = True
        await self.rules.registry.save(entry)
        return cancel_answer_v1(await self.current(entry))


def _payload_answer(payload: V1Payload | None, task_id: str) -> dict[str, Any]:
    """The `tasks/result` answer: the result with related-task `_meta`, or the error raised."""
    if payload is None or payload.body is None:
        raise McpError(INTERNAL_ERROR, "Task has no result")
    if payload.kind == "error":
        body = payload.body
        raise McpError(body.get("code", INTERNAL_ERROR), body.get("message", "Task failed"), body.get("data"))
    return add_related_task(legacy_result("tools/call", payload.body), task_id)
