"""What a v1 session's GET stream carries for its tasks over a v2 backend (docs/behaviour.md §5.7, §5.8).

While a session of a v1 client holds its GET stream open and has tasks that have not ended, one
follower per session reads each of them upstream (`tasks/get`, at the task's `pollIntervalMs`,
kept between `MIN_POLL_S` and `MAX_POLL_S`); every change of status goes out as
`notifications/tasks/status` (`_Call.current`). A task that stays `input_required` for
`QUESTION_GRACE_S` while no `tasks/result` of that client waits on it has its questions put on the
GET stream (core 2025-11-25 lets a receiver send a task's requests on any stream), each key once,
with related-task `_meta`; the answers go upstream as `tasks/update`. The follower ends with the
stream or when every task of the session has ended; nothing runs for sessions without a GET stream.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from translators import jsonrpc
from translators.errors import INTERNAL_ERROR, McpError

from ..faces.session import ASK_TIMEOUT_S, ProxySession
from ..state.client_tasks import HELD, Entry, TaskRegistry
from ..state.health import StoreTrouble

log = logging.getLogger(__name__)

MAX_POLL_S = 1.0
"""A followed task is read upstream at its `pollIntervalMs`, at most this far apart..."""
MIN_POLL_S = 0.05
"""...and at least this far apart."""
GET_ASK_GIVE_UP_S = 5.0
"""A request put on a GET stream is given up this long after the session last had one open."""
_request_ids = itertools.count(1)
QUESTION_GRACE_S = 1.0
"""How long a task stays `input_required`, with no `tasks/result` of its client waiting, before its
questions go out on the GET stream: a client that calls `tasks/result` once it sees
`input_required` (as 2025-11-25 requires of requestors) gets them there (docs/decisions.md §53)."""


def poll_delay(poll_interval_ms: int | None) -> float:
    """Seconds until the next read of a task whose backend suggests `poll_interval_ms` (500 ms
    when it gives none), kept between `MIN_POLL_S` and `MAX_POLL_S`."""
    return min(max((poll_interval_ms or 500) / 1000, MIN_POLL_S), MAX_POLL_S)


class GetStreamReply:
    """The `SessionReply` part `_Call` uses to ask the client (`ask`), on the session's GET stream."""

    def __init__(self, session: ProxySession):
        self.session = session

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Put a request to the client on its GET stream (kept for replay like a notification; core
        2025-11-25 lets a server send requests on any stream) and wait for its JSON-RPC response.
        Raises `McpError` when no GET stream is open, when the session holds none any more for
        `GET_ASK_GIVE_UP_S`, or after `ASK_TIMEOUT_S`."""
        session = self.session
        if session.get_stream is None:
            raise McpError(INTERNAL_ERROR, f"No GET stream to put {method} on")
        request_id = f"mcp-tasks-proxy-get-{next(_request_ids)}"
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        session.pending[request_id] = future
        deadline = time.monotonic() + ASK_TIMEOUT_S
        try:
            await session.notify(jsonrpc.request(request_id, method, params))
            while time.monotonic() < deadline:
                done, _ = await asyncio.wait([future], timeout=GET_ASK_GIVE_UP_S)
                if done:
                    return future.result()
                if session.get_stream is None:  # gone, not resumed: asked again on a later stream or tasks/result
                    break
            raise McpError(INTERNAL_ERROR, f"The client did not answer {method} on its GET stream")
        finally:
            session.pending.pop(request_id, None)
            future.cancel()


class TaskPush:
    """The followers of one `V1OverV2`'s sessions, and which tasks a `tasks/result` waits on.
    `make_call(session, reply, headers, dialect)` gives the rules of one request (`_Call`: `current`,
    `ask_open`); `backend` is the member's `Backend`."""

    def __init__(self, registry: TaskRegistry, backend: Any, make_call: Callable[..., Any]):
        self.registry = registry
        self.backend = backend
        self.make_call = make_call
        self._followers: dict[str, asyncio.Task[None]] = {}
        self._askers: set[asyncio.Task[None]] = set()
        self.waiting: collections.Counter[str] = collections.Counter()
        """Client-facing task id → how many `tasks/result` of its client wait on it now."""

    def watch(self, session: ProxySession, headers: dict[str, str]) -> None:
        """Follow the session's tasks while its GET stream is open (no-op without one, or when a
        follower runs already). `headers`: those sent upstream for the session's requests."""
        if session.get_stream is None or session.get_stream_gone():
            return
        running = self._followers.get(session.id)
        if running is not None and not running.done():
            return
        self._followers[session.id] = asyncio.ensure_future(self._follow(session, headers))

    async def _open_tasks(self, session: ProxySession) -> list[Entry]:
        return [entry for entry in await self.registry.listing(session.principal, session.id)
                if entry.session_id == session.id and entry.ref.session != HELD and not entry.last.terminal]

    async def _follow(self, session: ProxySession, headers: dict[str, str]) -> None:
        parked: dict[str, float] = {}  # task id → when it was first seen input_required with nobody waiting
        try:
            while session.get_stream is not None and not session.get_stream_gone():
                try:
                    entries = await self._open_tasks(session)
                except StoreTrouble:  # logged once by the store (decision 76): follow on when it is back
                    await asyncio.sleep(MAX_POLL_S)
                    continue
                if not entries:
                    return
                dialect = (await self.backend.current()).dialect
                call = self.make_call(session, GetStreamReply(session), headers, dialect)
                delay = MAX_POLL_S
                for entry in entries:
                    try:
                        task = await call.current(entry)
                    except McpError as exc:
                        log.info("following task of session for its GET stream: %s", exc.message)
                        continue
                    delay = min(delay, poll_delay(task.poll_interval_ms))
                    if task.status != "input_required" or self.waiting[entry.task_id]:
                        parked.pop(entry.task_id, None)
                        continue
                    since = parked.setdefault(entry.task_id, time.monotonic())
                    if time.monotonic() - since >= QUESTION_GRACE_S:
                        self._ask(call, entry, task)
                await asyncio.sleep(delay)
        except asyncio.CancelledError:
            raise
        except Exception:  # never let a follower die silently: the client would wait for ever
            log.exception("following the tasks of a session for its GET stream")
        finally:
            if self._followers.get(session.id) is asyncio.current_task():
                self._followers.pop(session.id, None)

    def _ask(self, call: Any, entry: Entry, task: Any) -> None:
        """Put the task's questions not yet asked on the GET stream, without holding up the follower."""
        if not any(key not in entry.asked and key not in entry.asking for key in task.input_requests):
            return
        asker = asyncio.ensure_future(call.ask_open(entry, task, entry.task_id))
        self._askers.add(asker)
        asker.add_done_callback(self._asked)

    def _asked(self, asker: asyncio.Task[Any]) -> None:
        self._askers.discard(asker)
        if not asker.cancelled() and asker.exception() is not None:
            log.info("a question put on a GET stream was not answered: %s", asker.exception())
