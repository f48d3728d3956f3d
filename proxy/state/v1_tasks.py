"""Following v1 tasks for v2 clients (docs/behaviour.md §4.3, §4.4).

The proxy asks upstream only when its client asks: `tasks/get` upstream for the status; while the
task needs input, one held `tasks/result` (and the session's GET stream) to capture the backend's
requests for input (`proxy.state.capture`); once the task is terminal, its payload (from the held
`tasks/result`, or one `tasks/result` that answers at once), folded into the v2 outcome and kept
(a terminal task never changes) for the task's ttl or `max_task_state_ms`, whichever is shorter,
within `max_tasks` entries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from translators.differences import V1Payload, outcome_to_v2
from translators.errors import FORGOTTEN, INVALID_PARAMS, METHOD_NOT_FOUND, McpError, unknown_task
from translators.fields import task_from_wire
from translators.model import CanonicalTask
from translators.sealing import TaskRef

from ..upstream.endpoint import read_again
from ..upstream.session_wire import SessionLost, UpstreamSession
from .capture import InputBook, TaskInputs
from .store import MemoryTaskStore, TaskStateStore

PAYLOAD_TIMEOUT_S = 30.0
"""How long a terminal task's `tasks/result` may take before the payload counts as unobtainable."""


class V1Follower:
    """Status, input requests and outcome of v1 tasks; terminal tasks remembered (bounded)."""

    def __init__(self, *, max_tasks: int, max_task_state_ms: int, input_capture_wait_ms: int, store: TaskStateStore | None = None,
                 backend: str = "main"):
        self._max_state_s = max_task_state_ms / 1000
        self._capture_wait_s = input_capture_wait_ms / 1000
        self.backend = backend
        self.store: TaskStateStore = store if store is not None else MemoryTaskStore(max_tasks=max_tasks)
        """Terminal outcomes and captured requests for input (`proxy/state/store.py`)."""
        self.inputs = InputBook(max_tasks=max_tasks, max_task_state_ms=max_task_state_ms, store=self.store)

    def _keep_s(self, task: CanonicalTask) -> float:
        return self._max_state_s if task.ttl_ms is None else min(task.ttl_ms / 1000, self._max_state_s)

    async def created(self, ref: TaskRef, session: UpstreamSession, headers: Mapping[str, str], ttl_ms: int | None) -> None:
        """Start following a task just created through the proxy (its session's GET stream is held,
        so requests for input sent there are not missed)."""
        await self.inputs.track(ref, session, headers, ttl_ms=ttl_ms)

    async def status(self, ref: TaskRef, session: UpstreamSession, headers: Mapping[str, str]) -> CanonicalTask:
        """The task as the hub sees it (upstream task id kept): outcome folded in when terminal,
        outstanding requests for input as `input_requests`.

        Raises `McpError(-32602)` when the backend does not know the task or forgot its session,
        and `McpError` (HTTP 502) when the backend is unreachable.
        """
        cached = await self.store.outcome(ref)
        if cached is not None:
            return cached
        try:
            wire = await self._read("tasks/get", ref, session, headers)
        except SessionLost:
            await self._lost(ref, session)
            raise unknown_task(FORGOTTEN) from None
        except McpError as exc:
            if exc.code == INVALID_PARAMS:
                await self.inputs.finish(ref)
                raise unknown_task(FORGOTTEN) from None
            if exc.code == METHOD_NOT_FOUND:
                # A "v1" backend that does not know tasks/get was upgraded (or replaced): the task
                # is gone with it, and the backend is probed again.
                session.backend.on_trouble()
                await self.inputs.finish(ref)
                raise unknown_task(FORGOTTEN) from None
            raise
        task = task_from_wire(wire, "v1")
        if task.dropped:
            session.backend.metrics.dropped(task.dropped, "a v1 tasks/get answer")
        inputs = await self.inputs.track(ref, session, headers, ttl_ms=task.ttl_ms)
        inputs.note_status(task.status)
        if task.terminal:
            if task.status in ("completed", "failed"):
                payload = inputs.payload or await self._payload(ref, session, headers)
                task = outcome_to_v2(task, payload)
            await self.inputs.finish(ref)
            await self.store.keep_outcome(ref, task, self._keep_s(task))
            if task.ttl_ms is not None and task.ttl_ms / 1000 <= self._max_state_s:
                # kept as long as the backend promised to keep it: the backend's copy is needed no more (§147)
                session.backend.outcome_kept(session.session_id, ref.task)
            return task
        return await self._with_inputs(task, inputs, headers)

    async def _read(self, method: str, ref: TaskRef, session: UpstreamSession, headers: Mapping[str, str]) -> dict[str, Any]:
        """`tasks/get` or `tasks/result` upstream, asked again while the backend's answers break off
        (it is stopping or restarting) for as long as requests may wait for it
        (`reconnect_wait_ms`, at least once; `read_again`): both only read, and a later try meets
        the restarted backend instead of failing the client."""
        return await read_again(lambda: session.request(method, {"taskId": ref.task}, headers=headers))

    async def _with_inputs(self, task: CanonicalTask, inputs: TaskInputs, headers: Mapping[str, str]) -> CanonicalTask:
        if task.status == "input_required":
            inputs.ensure_held(headers)
            await inputs.wait_for_request(self._capture_wait_s)
        requests = await inputs.requests()
        if requests:
            return task.evolve(status="input_required", input_requests=requests)
        return task

    async def _payload(self, ref: TaskRef, session: UpstreamSession, headers: Mapping[str, str]) -> V1Payload:
        try:
            async with asyncio.timeout(PAYLOAD_TIMEOUT_S):
                result = await self._read("tasks/result", ref, session, headers)
        except SessionLost:
            # The backend forgot the session (restarted, replaced) between the status and the
            # payload: the task is unknown, as on `tasks/get` — not "failed", which would be wrong.
            await self._lost(ref, session)
            raise unknown_task(FORGOTTEN) from None
        except TimeoutError:
            return V1Payload("unobtainable")
        except McpError as exc:
            if exc.http_status is not None:
                raise
            return V1Payload("error", exc.to_dict())
        return V1Payload("result", result)

    async def answer(self, ref: TaskRef, session: UpstreamSession, responses: Mapping[str, object], headers: Mapping[str, str]) -> None:
        """Deliver `tasks/update` answers: each outstanding key goes upstream as the JSON-RPC
        response to the request it names; other keys (unknown, answered, or of an ended task) are
        ignored (docs/behaviour.md §4.5)."""
        if await self.store.outcome(ref) is not None:
            return
        inputs = self.inputs.get(ref)
        if inputs is None and await self.store.inputs(ref):
            # Requests another replica captured (a shared store): answer them from here.
            inputs = await self.inputs.track(ref, session, headers)
        if inputs is None:
            # Not followed in this process (a restart, or lost with its session): the backend must
            # still know the task, else it is unknown (docs/behaviour.md §4.1, §4.5).
            await self.status(ref, session, headers)
            return
        try:
            await inputs.answer(responses, headers)
        except SessionLost:
            await self._lost(ref, session)
            raise unknown_task(FORGOTTEN) from None

    async def _lost(self, ref: TaskRef, session: UpstreamSession) -> None:
        """The backend forgot `session` (restarted, replaced): `ref` and every other task followed on
        it are gone with it, and no longer live (docs/decisions.md §101)."""
        await self.inputs.finish(ref)
        for inputs in self.inputs.tasks_of(session):
            await self.inputs.finish(inputs.ref)

    def __len__(self) -> int:
        """Tasks followed now: those with input state plus the terminal ones remembered."""
        return len(self.inputs) + self.store.outcome_count(self.backend)

    def unfinished(self) -> int:
        """Tasks followed now that are not known to be finished: those with input state (a task
        leaves it when it is seen terminal, or unknown to the backend)."""
        return len(self.inputs)

    def close(self) -> None:
        self.inputs.close()
