"""Following v1 tasks for v2 clients (TRANSLATION.md §4.3, §4.4).

The proxy asks upstream only when its client asks: `tasks/get` upstream for the status, and, once
the task is terminal, `tasks/result` once for the payload, folded into the v2 outcome and kept
(a terminal task never changes) for the task's ttl or `max_task_state_ms`, whichever is shorter,
within `max_tasks` entries.
"""

from __future__ import annotations

import asyncio
import time
from typing import Mapping

from cachetools import TLRUCache

from translators.differences import V1Payload, outcome_to_v2
from translators.errors import INVALID_PARAMS, McpError, unknown_task
from translators.fields import task_from_wire
from translators.model import CanonicalTask
from translators.sealing import TaskRef

from .upstream.session_wire import SessionLost, UpstreamSession

PAYLOAD_TIMEOUT_S = 30.0
"""How long a terminal task's `tasks/result` may take before the payload counts as unobtainable."""


class V1Follower:
    """Status and outcome of v1 tasks, with terminal tasks remembered (bounded in count and time)."""

    def __init__(self, *, max_tasks: int, max_task_state_ms: int):
        self._max_state_s = max_task_state_ms / 1000
        self._terminal: TLRUCache[TaskRef, CanonicalTask] = TLRUCache(
            maxsize=max_tasks, ttu=self._expiry, timer=time.monotonic
        )

    def _expiry(self, _ref: TaskRef, task: CanonicalTask, now: float) -> float:
        keep = self._max_state_s if task.ttl_ms is None else min(task.ttl_ms / 1000, self._max_state_s)
        return now + keep

    async def status(self, ref: TaskRef, session: UpstreamSession, headers: Mapping[str, str]) -> CanonicalTask:
        """The task as the hub sees it, outcome folded in when terminal (upstream task id kept).

        Raises `McpError(-32602)` when the backend does not know the task or forgot its session,
        and `McpError` (HTTP 502) when the backend is unreachable.
        """
        cached = self._terminal.get(ref)
        if cached is not None:
            return cached
        try:
            wire = await session.request("tasks/get", {"taskId": ref.task}, headers=headers)
        except SessionLost:
            raise unknown_task() from None
        except McpError as exc:
            if exc.code == INVALID_PARAMS:
                raise unknown_task() from None
            raise
        task = task_from_wire(wire, "v1")
        if task.status in ("completed", "failed"):
            task = outcome_to_v2(task, await self._payload(ref, session, headers, task.status))
        if task.terminal:
            self._terminal[ref] = task
        return task

    async def _payload(self, ref: TaskRef, session: UpstreamSession, headers: Mapping[str, str], status: str) -> V1Payload:
        try:
            async with asyncio.timeout(PAYLOAD_TIMEOUT_S):
                result = await session.request("tasks/result", {"taskId": ref.task}, headers=headers)
        except (SessionLost, TimeoutError):
            return V1Payload("unobtainable")
        except McpError as exc:
            if exc.http_status is not None:
                raise
            # An error is the task's own outcome only for a failed task; a completed task whose
            # payload comes back as an error has lost it (e.g. "-32602 not found").
            return V1Payload("error", exc.to_dict()) if status == "failed" else V1Payload("unobtainable")
        return V1Payload("result", result)

    def forget(self, ref: TaskRef) -> None:
        """Drop what is remembered of a task (e.g. after a cancel)."""
        self._terminal.pop(ref, None)
