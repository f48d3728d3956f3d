"""`subscriptions/listen` for a modern client in front of a session-wire backend (docs/behaviour.md §4.9).

The answer is a long-lived SSE stream (`ModernRequest.notify`): the acknowledgement with the
requested filter narrowed to what the backend offers (`translators.subscriptions`), then, stamped
with the subscription id, each list change or resource update the backend announces on the GET
stream of the caller's pooled upstream session (held once per session by
`proxy.state.capture.SessionListener`, so every listener of a principal shares one upstream
stream), and `notifications/tasks` for each acknowledged task whose `tasks/get` answer changed:
read at the task's `pollIntervalMs` (50 ms–1 s) and at once when the backend pushes a
`notifications/tasks/status`, until the task ends. When the backend forgets the upstream session,
the listen goes on on the principal's new one (decision 69). The stream ends when the client
closes it (the handler is cancelled); the upstream GET stream is closed with the last listener of
a session that carries no followed task (`InputBook.unsubscribe`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from translators.errors import McpError, missing_tasks_extension
from translators.protocol import TERMINAL_STATUSES
from translators.sealing import TaskRef
from translators.subscriptions import acknowledged, for_subscription, narrow_filter, offered_filter, tasks_notification

from ..faces.modern import ModernRequest, Reply
from ..state.capture import SessionListener
from .v1_task_push import poll_delay

QUEUE_LIMIT = 1000
"""Notifications waiting for one slow listener; beyond it the oldest are dropped (they are level
triggers: "refetch if you care")."""


async def listen(pairing: Any, call: ModernRequest) -> Reply:
    """Serve one (`pairing`: the `V2OverV1` of the backend) `subscriptions/listen` until the client goes away. Raises `McpError(-32021)` when
    `taskIds` are asked for without the tasks extension declared on the request."""
    requested = call.params.get("notifications")
    if isinstance(requested, dict) and requested.get("taskIds") and not call.meta.declares_tasks:
        raise missing_tasks_extension("subscriptions/listen: taskIds need the tasks extension (io.modelcontextprotocol/tasks) declared")
    profile = await pairing.backend.current()
    agreed = narrow_filter(requested, offered_filter(profile.capabilities, offers_tool_tasks=profile.offers_tool_tasks))
    tasks: dict[str, TaskRef] = {}
    for task_id in agreed.get("taskIds", ()):
        try:
            ref = pairing.keyring.unseal_task_id(task_id, call.principal)
        except McpError:
            continue
        if ref.backend == pairing.backend.name and ref.session:
            tasks[task_id] = ref
    if "taskIds" in agreed:
        agreed["taskIds"] = list(tasks)
    subscription = call.request_id
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def heard(message: dict[str, Any]) -> None:
        if queue.qsize() >= QUEUE_LIMIT:
            queue.get_nowait()
        queue.put_nowait(message)

    listener = await _attach(pairing, call, agreed, heard, asyncio.get_running_loop().time())
    try:
        await call.notify(acknowledged(subscription, agreed))
        last: dict[str, dict[str, Any]] = {}
        while True:
            delay = await _read_tasks(pairing, call, tasks, last)
            getter = asyncio.ensure_future(queue.get())
            ending = {listener.task} if listener is not None and not listener.task.done() else set()
            try:
                await asyncio.wait({getter, *ending}, timeout=delay, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()
            message = getter.result() if getter.done() and not getter.cancelled() else None
            while message is not None:
                out = for_subscription(message, subscription, agreed)
                if out is not None:
                    await call.notify(out)
                message = queue.get_nowait() if not queue.empty() else None
            if listener is not None and listener.task.done() and listener.session.lost:
                # The backend forgot the session (its GET stream met 404): go on on the new one.
                pairing.follower.inputs.unsubscribe(listener, heard)
                listener = await _attach(pairing, call, agreed, heard, asyncio.get_running_loop().time())
    finally:
        if listener is not None:
            pairing.follower.inputs.unsubscribe(listener, heard)


async def _attach(pairing: Any, call: ModernRequest, agreed: dict[str, Any], heard: Callable[[dict[str, Any]], None],
                  since: float) -> SessionListener | None:
    """Subscribe `heard` to the GET stream of the caller's pooled upstream session (opened before
    `notifications/initialized` when this creates the session), with what it heard since `since`,
    and subscribe the session to the agreed resources. None for a backend without session ids."""

    async def hear_from_the_start(opened: Any) -> None:
        await pairing.follower.inputs.listening(opened, call.upstream_headers)

    book = pairing.follower.inputs
    session = await pairing._session(call, before_initialized=hear_from_the_start)
    await book.listening(session, call.upstream_headers)
    listener: SessionListener | None = book.listener(session, call.upstream_headers)
    if listener is not None:
        listener.subscribe(heard, since)
    try:
        for uri in agreed.get("resourceSubscriptions", ()):
            await session.request("resources/subscribe", {"uri": uri}, headers=call.upstream_headers)
    except BaseException:
        if listener is not None:
            book.unsubscribe(listener, heard)
        raise
    return listener


async def _read_tasks(pairing: Any, call: ModernRequest, tasks: dict[str, TaskRef], last: dict[str, dict[str, Any]]) -> float | None:
    """Read each followed task; send `notifications/tasks` for each whose answer changed, forget
    the ended ones. Seconds until the next read (None: no task left to follow)."""
    delay: float | None = None
    for task_id, ref in list(tasks.items()):
        get = ModernRequest("tasks/get", {"taskId": task_id}, call.meta, call.principal, call.upstream_headers)
        try:
            detailed = (await pairing.task(get, ref)).result
        except McpError:
            tasks.pop(task_id)
            continue
        shown = {key: value for key, value in detailed.items() if key != "_meta"}
        if last.get(task_id) != shown:
            last[task_id] = shown
            await call.notify(tasks_notification(call.request_id, detailed))
        if detailed.get("status") in TERMINAL_STATUSES:
            tasks.pop(task_id)
            continue
        interval = detailed.get("pollIntervalMs")
        step = poll_delay(interval if isinstance(interval, int) else None)
        delay = step if delay is None else min(delay, step)
    return delay
