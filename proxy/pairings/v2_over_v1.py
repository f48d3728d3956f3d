"""v2-modern clients in front of a v1 backend (docs/behaviour.md §4): what each request means.

The entry (`proxy/entry.py`) has parsed and checked the request; this module answers it on the
backend's session wire: `server/discover` from the probed profile, `tools/call` as a task or not
(`translators.policy.creation_decision`), `tasks/*` by following the upstream task
(`proxy/state/v1_tasks.py`), and input asked for during a synchronous call as MRTR rounds over a
held upstream exchange (`proxy/pairings/mrtr.py`). Every reshaping is a call into `translators`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from translators.differences import (
    cancel_answer_v2,
    created_task_from_v1,
    created_task_result_v2,
    drop_task_param,
    get_task_result_v2,
    task_param_v1,
    update_ack_v2,
)
from translators.envelope import complete_result, strip_envelope, upstream_client_capabilities
from translators.errors import (
    ELSEWHERE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    McpError,
    missing_tasks_extension,
    unknown_task,
)
from translators.held import HELD_SESSION
from translators.inputs import input_required_result, read_input_responses, strip_mrtr
from translators.policy import creation_decision
from translators.protocol import (
    H_NAME,
    MODERN_VERSION,
    MRTR_METHODS,
    REMOVED_MODERN_METHODS,
    REMOVED_TASK_METHODS_V2,
    TASK_METHODS_V2,
)
from translators.results import discover_result, tools_list_to_v2
from translators.sealing import TaskRef

from ..faces.modern import ModernRequest, Reply
from ..upstream.pool import Starting
from ..upstream.session_wire import SessionLost, UpstreamSession
from .handover import HeldAt, requests_of
from .listen import listen
from .mrtr import Exchange, Finished
from .parts import MemberParts


class V2OverV1:
    """The rules of §4 for one session-wire backend; `answer` is the pairing's one entry point."""

    def __init__(self, parts: MemberParts):
        self.parts = parts
        self.settings = parts.settings
        self.keyring = parts.keyring
        self.backend = parts.backend
        self.follower = parts.follower
        self.exchanges = parts.exchanges

    async def answer(self, call: ModernRequest) -> Reply:
        """Answer one checked modern request. Raises `McpError` for every refusal."""
        method = call.method
        if method == "server/discover":
            if self.backend.protected:  # the backend says who may see it, as for every request (issue 37)
                await self._upstream(call, "ping", {})
            return Reply(await self.discover())
        if method == "tools/call":
            return await self.call_tool(call)
        if method in TASK_METHODS_V2:
            if not call.meta.declares_tasks:
                raise missing_tasks_extension(f"{method} needs the tasks extension (io.modelcontextprotocol/tasks) declared on the request")
            return await self.task(call, self._unseal(call))
        if method in REMOVED_TASK_METHODS_V2:
            raise McpError(METHOD_NOT_FOUND,
                           f"Method not found: {method} does not exist on the {MODERN_VERSION} wire; tasks/get inlines results", method)
        if method == "subscriptions/listen":
            return await listen(self, call)
        if method in REMOVED_MODERN_METHODS or method.startswith("tasks/"):
            raise McpError(METHOD_NOT_FOUND, f"Method not found: {method}", method)
        if method in MRTR_METHODS:
            name = call.params.get("name") if method == "prompts/get" else call.params.get("uri")
            if "requestState" in call.params:
                return await self._resume(call, str(name))
            return await self._exchange(call, str(name), strip_mrtr(strip_envelope(call.params)))
        return await self.forward(call)

    def _unseal(self, call: ModernRequest) -> TaskRef:
        """The task a translated `tasks/*` call names: sealed for this backend, on an upstream
        session (an id without one was relayed to this backend when it spoke v2-modern). Raises
        `McpError(-32602)` "Unknown task"."""
        ref = self.keyring.unseal_task_id(call.params.get("taskId"), call.principal)
        if ref.backend != self.backend.name or not ref.session:
            raise unknown_task(ELSEWHERE)
        return ref

    def session_capabilities(self, call: ModernRequest) -> dict[str, Any]:
        """What the caller's upstream session declares in `initialize` (docs/behaviour.md §4.1)."""
        return upstream_client_capabilities(call.meta.client_capabilities)

    async def _session(self, call: ModernRequest, *, before_initialized: Starting | None = None) -> UpstreamSession:
        return await self.backend.pool.shared(call.principal, self.session_capabilities(call), call.upstream_headers,
                                              before_initialized=before_initialized)

    async def _upstream(self, call: ModernRequest, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A request on the caller's pooled session; a session the backend forgot (404 before it
        processed anything) is re-created and the request sent once more."""
        session = await self._session(call)
        try:
            return await session.request(method, params, headers=call.upstream_headers)
        except SessionLost:
            session = await self._session(call)
            return await session.request(method, params, headers=call.upstream_headers)

    async def discover(self) -> dict[str, Any]:
        """`server/discover` answered by the proxy (docs/behaviour.md §4.9)."""
        profile = await self.backend.current()
        held = self.parts.held  # holding on: the proxy offers tasks for every tool (docs/behaviour.md §9)
        return discover_result(profile.capabilities, profile.instructions,
                               offers_tool_tasks=profile.offers_tool_tasks or (held is not None and held.on),
                               cache_ttl_ms=self.settings.cache_ttl_ms)

    async def forward(self, call: ModernRequest) -> Reply:
        """Any other method, forwarded with the modern envelope removed (docs/behaviour.md §4.8)."""
        result = await self._upstream(call, call.method, strip_envelope(call.params))
        if call.method == "tools/list":
            result = tools_list_to_v2(result)
        return Reply(complete_result(call.method, result, cache_ttl_ms=self.settings.cache_ttl_ms))

    async def call_tool(self, call: ModernRequest) -> Reply:
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
            held = self.parts.held
            if held is not None and call.meta.declares_tasks and held.holds(name, support, profile.offers_tool_tasks):
                return await self._held_call(call, name, params)
            return await self._exchange(call, name, params)
        ephemeral = self.settings.v1_session_scope == "task"
        if ephemeral:
            session = await self.backend.pool.fresh(upstream_client_capabilities(call.meta.client_capabilities), call.upstream_headers,
                                                    call.principal)
        else:
            session = await self._session(call)
        await self.follower.inputs.listening(session, call.upstream_headers, ephemeral=ephemeral)
        params["task"] = task_param_v1(self.settings.task_ttl_ms)
        return await self._exchange(call, name, params, session=session, creates_task=decision)

    async def _held_call(self, call: ModernRequest, name: str, params: dict[str, Any]) -> Reply:
        """A plain call that becomes a held task if it runs past `hold_after_ms`
        (`proxy/pairings/held.py`, docs/behaviour.md §9); answered in time, it is answered as
        any synchronous call (its result, or the MRTR round the backend asked for)."""
        held = self.parts.held
        assert held is not None
        session = await self._session(call)
        exchange = held.start(call.principal, name, params, session, call.upstream_headers)
        exchange.attend(held.client_notify(call.notify), call.meta.log_level)
        answered, requests = await held.first_round(exchange)
        try:
            if answered:
                return await self._answered(call, exchange, requests)
            holding = await held.promote(exchange, call.principal, name)
            if holding is not None:
                return held.created_reply(holding)
            return await self._round(call, exchange)  # not held (bounds, backend refusing): it stays synchronous
        except SessionLost:  # the backend forgot the pooled session before processing anything
            return await self._exchange(call, name, params)

    # -- MRTR: synchronous calls that may ask for input, over a held upstream exchange ---------------

    async def _exchange(self, call: ModernRequest, name: str, params: dict[str, Any], *, session: UpstreamSession | None = None,
                        creates_task: str | None = None) -> Reply:
        """Send the upstream call. An answer that comes as JSON is finished at once; one on an SSE
        stream, where the backend may ask for input first, is read by an exchange of its own, whose
        first round is answered (docs/decisions.md §185)."""
        shared = session is None or self.settings.v1_session_scope == "principal"
        session = session or await self._session(call)
        for last in (not shared, True):  # a session of the call's own is not asked again
            try:
                opened = await session.open(call.method, params, headers=call.upstream_headers)
                break
            except SessionLost:
                if last:
                    raise McpError(INTERNAL_ERROR, f"Backend {self.backend.name!r} lost the upstream session") from None
                # The backend forgot the pooled session before processing anything: once more, anew.
                session = await self._session(call)
        if not opened.streamed:
            assert opened.result is not None
            return await self.finish(call, Finished(call.method, creates_task, session), opened.result)
        exchange = self.exchanges.open((call.principal, call.method, name, call.upstream_headers), session, creates_task)
        exchange.attend(call.notify, call.meta.log_level)
        exchange.start(opened.read)
        return await self._round(call, exchange)

    async def _resume(self, call: ModernRequest, name: str) -> Reply:
        """An MRTR retry: answer the held exchange's requests upstream, then its next round."""
        fields = self.keyring.unseal_request_state(call.params.get("requestState"), call.principal, int(time.time() * 1000))
        responses = read_input_responses(call.params)
        exchange_id = fields[0] if fields else ""
        handover = self.exchanges.handover
        if handover is not None and len(fields) == 3 and fields[2] != handover.process and not self.exchanges.holds(exchange_id):
            return await self._resume_elsewhere(call, name, exchange_id, fields[2], responses)
        exchange = self.exchanges.take(exchange_id, call.principal, call.method, name)
        exchange.attend(call.notify, call.meta.log_level)
        try:
            await exchange.deliver(responses)
        except SessionLost:
            self.exchanges.drop(exchange)
            raise McpError(INVALID_PARAMS, "Unknown or expired requestState: the backend lost the session") from None
        return await self._round(call, exchange)

    async def _resume_elsewhere(self, call: ModernRequest, name: str, exchange_id: str, holder: str,
                                responses: dict[str, Any]) -> Reply:
        """An MRTR retry of an exchange the process `holder` holds: handed to it
        (`proxy/pairings/handover.py`); its next round, or the upstream answer finished here."""
        handover = self.exchanges.handover
        assert handover is not None
        reply = await handover.resume(HeldAt(holder, self.backend.name, exchange_id), call, name, responses)
        if "requests" in reply:
            return Reply(input_required_result(requests_of(reply), self._state(call, exchange_id, holder)))
        finished = Finished(str(reply.get("method")), reply.get("context"), self.backend.pool.by_id(str(reply.get("session") or "")))
        return await self.finish(call, finished, reply.get("answer") or {})

    def _state(self, call: ModernRequest, exchange_id: str, holder: str | None) -> str:
        """The sealed `requestState` naming an exchange (and, with a shared store, its holder)."""
        expires_ms = int(time.time() * 1000) + self.settings.request_state_ttl_ms
        fields = (exchange_id, self.backend.name) if holder is None else (exchange_id, self.backend.name, holder)
        return self.keyring.seal_request_state(fields, call.principal, expires_ms)

    async def _round(self, call: ModernRequest, exchange: Exchange) -> Reply:
        """The next answer of an exchange: the final result (`finish`), or an `InputRequiredResult`."""
        try:
            requests = await exchange.next_round()
        except asyncio.CancelledError:
            # The client went away. An exchange never handed out is cancelled upstream (the
            # backend hears notifications/cancelled); a held one waits for the client's retry.
            exchange.notify = None
            if not self.exchanges.is_held(exchange):
                exchange.abandon()
            raise
        return await self._answered(call, exchange, requests)

    async def _answered(self, call: ModernRequest, exchange: Exchange, requests: dict[str, Any] | None) -> Reply:
        """A round's answer: an `InputRequiredResult` (the exchange held) or the final result."""
        exchange.notify = None  # nobody waits on the exchange until the client's retry
        if requests is not None:
            self.exchanges.hold(exchange)
            handover = self.exchanges.handover
            state = self._state(call, exchange.id, handover.process if handover is not None else None)
            return Reply(input_required_result(requests, state))
        self.exchanges.release(exchange)
        assert exchange.upstream is not None
        return await self.finish(call, exchange, exchange.upstream.result())

    async def finish(self, call: ModernRequest, exchange: Exchange | Finished, answer: dict[str, Any]) -> Reply:
        """The client's answer once the upstream call ended: a plain result, or the v1 task it
        created, followed (§4.3) and shown with a sealed id, or waited for (`"wait"`)."""
        if exchange.context is None or "task" not in answer:
            # A plain result (also when the backend ran a task-supporting tool inline after all).
            return Reply(complete_result(exchange.method, answer, cache_ttl_ms=self.settings.cache_ttl_ms))
        created = created_task_from_v1(answer)
        if created.dropped:
            self.backend.metrics.dropped(created.dropped, "a v1 CreateTaskResult")
        ref = TaskRef(self.backend.name, exchange.session.session_id or "", created.task_id)
        await self.follower.created(ref, exchange.session, call.upstream_headers, created.ttl_ms)
        if exchange.context == "wait":
            return Reply(await self._wait(call, ref, exchange.session))
        task_id = self.keyring.seal_task_id(ref, call.principal)
        return Reply(created_task_result_v2(created.evolve(task_id=task_id)), {H_NAME: task_id})

    # -- tasks/* --------------------------------------------------------------------------------------

    async def task(self, call: ModernRequest, ref: TaskRef) -> Reply:
        """`tasks/get`, `tasks/update` or `tasks/cancel` of a task this backend holds (or the proxy
        holds itself: a held task, `proxy/pairings/held.py`)."""
        if ref.session == HELD_SESSION and self.parts.held is not None:
            return await self.parts.held.task_v2(call, ref)
        if call.method == "tasks/get":
            return await self.get_task(call, ref)
        if call.method == "tasks/update":
            return await self.update_task(call, ref)
        return await self.cancel_task(call, ref)

    async def _wait(self, call: ModernRequest, ref: TaskRef, session: UpstreamSession) -> dict[str, Any]:
        """`required_without_extension = "wait"`: follow the upstream task to its end and answer
        the final result, or its error as a JSON-RPC error."""
        while True:
            task = await self.follower.status(ref, session, call.upstream_headers)
            if task.status == "completed" and task.result is not None:
                return complete_result("tools/call", task.result)
            if task.status == "failed" and task.error is not None:
                raise McpError(task.error.code, task.error.message, task.error.data)
            if task.status == "cancelled":
                raise McpError(INTERNAL_ERROR, "Task was cancelled")
            await asyncio.sleep((task.poll_interval_ms or self.settings.wait_poll_ms) / 1000)

    async def get_task(self, call: ModernRequest, ref: TaskRef) -> Reply:
        """`tasks/get` (docs/behaviour.md §4.4)."""
        task = await self.follower.status(ref, self.backend.pool.by_id(ref.session), call.upstream_headers)
        return Reply(get_task_result_v2(task.evolve(task_id=call.params["taskId"])))

    async def update_task(self, call: ModernRequest, ref: TaskRef) -> Reply:
        """`tasks/update` (docs/behaviour.md §4.5): each outstanding key's answer goes upstream as the
        response to the captured request; unknown, answered or late keys are ignored."""
        responses = read_input_responses(call.params)
        session = self.backend.pool.by_id(ref.session)
        await self.follower.answer(ref, session, responses, call.upstream_headers)
        return Reply(update_ack_v2())

    async def cancel_task(self, call: ModernRequest, ref: TaskRef) -> Reply:
        """`tasks/cancel` (docs/behaviour.md §4.6): whatever the v1 backend answers becomes the ack."""
        session = self.backend.pool.by_id(ref.session)
        try:
            await session.request("tasks/cancel", {"taskId": ref.task}, headers=call.upstream_headers)
        except SessionLost:
            pass
        except McpError as exc:
            if exc.http_status is not None:
                raise
        return Reply(cancel_answer_v2())  # an outcome the proxy keeps is terminal: a cancel changes nothing (§147)
