"""Capturing a v1 backend's requests for input, per task (docs/behaviour.md §4.3, §4.5).

A v1 server asks for input with server→client requests: on the stream of a pending `tasks/result`
(mcp 1.30) or on the session's GET stream (FastMCP 3). The proxy holds those requests unanswered,
shows them to the v2 client as `inputRequests` under keys it mints (never reused within a task), and
answers each upstream, same session and same request id, when the client's `tasks/update` brings
the answer.

* `TaskInputs`: one task's held `tasks/result`; its outstanding requests and key counter are kept
  in the `TaskStateStore` (`proxy/state/store.py`), the state replicas would share.
* `SessionListener`: one upstream session's GET stream, attributing what arrives to a task.
* `InputBook`: all of it for one backend, bounded in count (least recently used first) and time
  (the task's ttl, or `max_task_state_ms` when the ttl is null); what is evicted stops listening.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from cachetools import TLRUCache

from translators.differences import V1Payload
from translators.errors import INVALID_PARAMS, McpError
from translators.inputs import input_request_from_v1, input_response_to_v1, is_input_request, related_task_id
from translators.model import InputRequest
from translators.sealing import TaskRef
from translators.subscriptions import CARRIED, TASK_STATUS_NAMES

from ..upstream.session_wire import NoStandaloneStream, SessionLost, UpstreamSession, listen, refuse_server_request
from .store import CapturedInput, TaskStateStore

log = logging.getLogger(__name__)

RECENT_LIMIT = 64
"""Notifications of a GET stream remembered for a listen that subscribes late (`SessionListener.subscribe`)."""

UNATTRIBUTED_LIMIT = 1000
"""Requests for input of a GET stream waiting to be attributed to a task; one beyond is answered at
once with the default refusal (-32601) instead of being kept (decision 69)."""

GET_STREAM_RETRY_S = 0.5
"""Pause before the GET stream of a session with live tasks is opened again after it ended..."""
GET_STREAM_MAX_RETRY_S = 30.0
"""...doubling while the backend keeps refusing it (an error status, a broken connection), up to this."""


def next_get_retry_s(previous_s: float, opened: bool) -> float:
    """Seconds to wait before a session's GET stream is asked for again (decision 69): after a
    stream the backend accepted (it ended, or broke later), `GET_STREAM_RETRY_S`; after one it
    refused, twice the previous wait (`GET_STREAM_RETRY_S` the first time), at most
    `GET_STREAM_MAX_RETRY_S`. `previous_s` is 0 before the first wait."""
    if opened or previous_s <= 0:
        return GET_STREAM_RETRY_S
    return min(previous_s * 2, GET_STREAM_MAX_RETRY_S)


class TaskInputs:
    """What the proxy holds for one upstream v1 task: the machinery that captures its requests for
    input (the held `tasks/result`) — the requests themselves are kept in the `TaskStateStore`.

    `status` is the last upstream status seen (from `tasks/get` or a status notification);
    `payload` is filled when a held `tasks/result` returns; `nonblocking` is set for backends whose
    `tasks/result` answers at once for a running task (FastMCP 3), which are followed by
    `tasks/get` alone.

    Slotted, and its event made on the first wait only: one is kept per live task, and an
    `asyncio.Event` is about 0.75 KiB (docs/decisions.md §122).
    """

    __slots__ = ("ref", "session", "keep_s", "store", "status", "announced", "payload", "nonblocking", "_arrived", "_holder",
                 "_held_error", "_captured")

    def __init__(self, ref: TaskRef, session: UpstreamSession, keep_s: float, store: TaskStateStore):
        self.ref = ref
        self.session = session
        self.keep_s = keep_s
        self.store = store
        self.status = "working"
        self.announced = 0
        """Status notifications that marked the task `input_required` whose request has not been
        attributed yet (FastMCP 3 announces, then sends the request without related-task `_meta`)."""
        self.payload: V1Payload | None = None
        self.nonblocking = False
        self._arrived: asyncio.Event | None = None
        """Set when a request is captured; made by the first `wait_for_request`."""
        self._holder: asyncio.Task[None] | None = None
        self._held_error: McpError | None = None
        self._captured: dict[str, CapturedInput] | None = None
        """With a shared store: the requests this process captured that it has not seen answered,
        put back if the store loses them (`restore`, docs/decisions.md §77); None until one is."""

    # -- capture and answer ----------------------------------------------------------------------

    async def outstanding(self) -> dict[str, CapturedInput]:
        """Requests held and not answered yet, by key, in the order they arrived."""
        held = await self.store.inputs(self.ref)
        if self._captured and any(key not in held for key in self._captured):
            # Answered through another process (the store still knows its upstream id), or lost
            # with the store's data (it does not: kept, to be put back).
            seen = await self.store.seen_ids(self.ref)  # type: ignore[attr-defined]
            for key, captured in list(self._captured.items()):
                if key not in held and captured.upstream_id in seen:
                    del self._captured[key]
        return held

    async def capture(self, message: Mapping[str, Any]) -> str | None:
        """Hold a server request for input (it came on this task's session) under a fresh key;
        None when already held (same id)."""
        request = input_request_from_v1(message)
        key = await self.store.capture_input(self.ref, message.get("id"), request, self.keep_s)  # type: ignore[arg-type]
        if key is not None:
            if self.store.shared:
                if self._captured is None:
                    self._captured = {}
                self._captured[key] = CapturedInput(key, message.get("id"), request)  # type: ignore[arg-type]
            self._wake()
        return key

    def _wake(self) -> None:
        if self._arrived is not None:
            self._arrived.set()

    async def restore(self) -> int:
        """The shared store lost its data: put back the requests this process captured and has not
        seen answered, under their keys (`RedisTaskStore.restore_input`); how many were put back."""
        restored = 0
        for captured in list((self._captured or {}).values()):
            if await self.store.restore_input(self.ref, captured, self.keep_s):  # type: ignore[attr-defined]
                restored += 1
        if restored:
            self._wake()
        return restored

    async def answer(self, responses: Mapping[str, Any], headers: Mapping[str, str]) -> list[str]:
        """Send each outstanding key's answer upstream (same session, same request id); unknown or
        already answered keys are ignored (docs/behaviour.md §4.5). Returns the keys delivered."""
        delivered = []
        for key, value in responses.items():
            captured = await self.store.claim_input(self.ref, key)  # one answer per key, however many arrive at once
            if captured is None:
                continue
            try:
                await self.session.deliver(input_response_to_v1(captured.upstream_id, value), headers=headers)
            except BaseException:
                await self.store.release_input(self.ref, key)  # the backend did not take it: the key stays outstanding
                raise
            await self.store.answered(self.ref, key)
            if self._captured is not None:
                self._captured.pop(key, None)
            delivered.append(key)
        return delivered

    async def requests(self) -> dict[str, InputRequest]:
        """Outstanding requests by key, in the order they arrived."""
        return {key: c.request for key, c in (await self.outstanding()).items()}

    async def wait_for_request(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for a request to be captured (returns at once if one is held)."""
        if await self.outstanding():
            return
        if self._arrived is None:
            self._arrived = asyncio.Event()
        self._arrived.clear()
        try:
            await asyncio.wait_for(self._arrived.wait(), timeout_s)
        except TimeoutError:
            pass

    # -- the held tasks/result -------------------------------------------------------------------

    def ensure_held(self, headers: Mapping[str, str]) -> None:
        """Make sure one upstream `tasks/result` (accepting SSE) is open for this task, where a v1
        server delivers its requests for input; re-opened when the backend dropped it."""
        if self.nonblocking or (self._holder is not None and not self._holder.done()):
            return
        self._holder = asyncio.ensure_future(self._hold(dict(headers)))

    async def _hold(self, headers: dict[str, str]) -> None:
        try:
            result = await self.session.request(
                "tasks/result", {"taskId": self.ref.task}, headers=headers, on_server_request=self._on_stream_request
            )
        except SessionLost:
            pass  # the backend forgot the session: the next tasks/get finds the task unknown
        except McpError as exc:
            if exc.http_status is None:
                self._held_error = exc  # an answer, not a dropped stream: see note_status()
            else:
                log.info("tasks/result stream for a task on %s ended early (%s); it is re-opened on the next tasks/get",
                         self.session.backend.name, exc.message)
        else:
            self.payload = V1Payload("result", result)

    async def _on_stream_request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        if not is_input_request(message):
            return await refuse_server_request(message)
        await self.capture(message)
        return None

    def note_status(self, status: str) -> None:
        """Record the upstream status. A held `tasks/result` that answered an error (-32602 "not
        completed") while the task is still running marks a backend that does not block."""
        self.status = status
        if self._held_error is not None and status in ("working", "input_required"):
            self.nonblocking = self._held_error.code == INVALID_PARAMS
            self._held_error = None

    def close(self) -> None:
        """Stop holding anything for this task here (its state was evicted from this process, or
        the proxy stops)."""
        if self._holder is not None and not self._holder.done():
            self._holder.cancel()

    async def end(self) -> None:
        """The task ended: stop holding it, and drop its requests from the store."""
        self.close()
        await self.store.drop_inputs(self.ref)


class SessionListener:
    """The GET stream of one upstream session, held while the session has tasks the proxy follows.

    A request for input belongs to the task named in its related-task `_meta`; without it, to the
    one task of the session that is `input_required` (or that a status notification just marked
    so); while that is ambiguous it waits, unanswered, until it is not (docs/behaviour.md §4.3).
    """

    def __init__(self, session: UpstreamSession, book: InputBook, headers: Mapping[str, str]):
        self.session = session
        self.book = book
        self.headers = dict(headers)
        self.sid = session.session_id or ""
        self.unattributed: list[dict[str, Any]] = []
        self.early: dict[str, tuple[str, int]] = {}
        """Status notifications about tasks not followed yet (they can overtake the answer that
        created the task): upstream task id → (last status, input_required announcements)."""
        self.ready = asyncio.Event()
        """Set once the stream is open, or once the backend refused it or it is known there will be none."""
        self.subscribers: set[Callable[[dict[str, Any]], None]] = set()
        """Called with every notification the stream carries (`subscriptions/listen`, §4.9)."""
        self.recent: deque[tuple[float, dict[str, Any]]] = deque(maxlen=RECENT_LIMIT)
        """The last list changes and resource updates heard, with the loop time they came (see `subscribe`)."""
        self.no_stream = False
        """Set when the backend offers no GET stream for the session (405): it is not asked again."""
        # Its own context: it serves the session, not the request that happened to start it (whose
        # request id its log lines would otherwise repeat, and whose trace it would join).
        self.task = asyncio.get_running_loop().create_task(self._run(), context=contextvars.Context())

    def subscribe(self, subscriber: Callable[[dict[str, Any]], None], since: float) -> None:
        """Call `subscriber` with every notification from now on, first with those heard since
        `since` (loop time; each distinct message once): a listen that opened this session hears
        what the backend announced while the session started (§4.9, decision 66)."""
        replayed: list[dict[str, Any]] = []
        for heard_at, message in self.recent:
            if heard_at >= since and message not in replayed:
                replayed.append(message)
                subscriber(message)
        self.subscribers.add(subscriber)

    async def _run(self) -> None:
        wait_s = 0.0
        opened = False

        def on_open() -> None:
            nonlocal opened
            opened = True
            self.ready.set()

        try:
            while not self.session.lost:
                opened = False
                try:
                    await listen(self.session, self._on_request, self._on_notification, headers=self.headers, on_open=on_open)
                except SessionLost:
                    return
                except NoStandaloneStream:
                    self.no_stream = True
                    return
                except McpError as exc:
                    log.info("GET stream of a session on %s failed: %s", self.session.backend.name, exc.message)
                self.ready.set()  # open, or refused once: nobody waits for a retry (`InputBook.listening`)
                wait_s = next_get_retry_s(wait_s, opened)
                await asyncio.sleep(wait_s)
        finally:
            self.ready.set()

    async def _on_request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        if not is_input_request(message):
            return await refuse_server_request(message)
        if not await self._attribute(message):
            if len(self.unattributed) >= UNATTRIBUTED_LIMIT:
                return await refuse_server_request(message)
            self.unattributed.append(message)
        return None

    async def _on_notification(self, message: dict[str, Any]) -> None:
        if message.get("method") in CARRIED:  # what a listen could be given, nothing else (task status is frequent)
            self.recent.append((asyncio.get_running_loop().time(), message))
        for subscriber in list(self.subscribers):
            subscriber(message)
        if message.get("method") not in TASK_STATUS_NAMES:  # v1's name, and a v2-session backend's (either name)
            return
        params = message.get("params") or {}
        task_id, status = params.get("taskId"), params.get("status")
        if not isinstance(task_id, str) or not isinstance(status, str):
            return
        inputs = self.book.find(self.session, task_id)
        if inputs is None:
            if len(self.early) < 1000:
                _, announced = self.early.get(task_id, ("working", 0))
                self.early[task_id] = (status, announced + (status == "input_required"))
            return
        inputs.note_status(status)
        if status == "input_required":
            inputs.announced += 1
        await self.retry()

    async def adopt(self, inputs: TaskInputs) -> None:
        """A task of this session is followed from now on: apply what was heard of it earlier."""
        early = self.early.pop(inputs.ref.task, None)
        if early is not None:
            inputs.note_status(early[0])
            inputs.announced += early[1]
        await self.retry()

    async def _attribute(self, message: dict[str, Any]) -> bool:
        task_id = related_task_id(message)
        if task_id is not None:
            inputs = self.book.find(self.session, task_id)
        else:
            tasks = self.book.tasks_of(self.session)
            waiting = [t for t in tasks if t.announced > 0] or [t for t in tasks if t.status == "input_required"]
            inputs = waiting[0] if len(waiting) == 1 else None
            if inputs is not None and inputs.announced > 0:
                inputs.announced -= 1
        if inputs is None:
            return False
        await inputs.capture(message)
        return True

    async def retry(self) -> None:
        """Attribute held requests again (a status changed)."""
        self.unattributed = [m for m in self.unattributed if not await self._attribute(m)]

    def close(self) -> None:
        self.task.cancel()


class _ClosingTLRU(TLRUCache):
    """A TLRU cache that closes what it evicts or expires."""

    def expire(self, time: float | None = None) -> list[tuple[Any, Any]]:  # type: ignore[override]
        expired = super().expire(time)
        for _, value in expired:
            value.close()
        return expired

    def popitem(self) -> tuple[Any, Any]:
        key, value = super().popitem()
        value.close()
        return key, value


class InputBook:
    """Input state of every followed task of one backend, and its sessions' GET listeners."""

    def __init__(self, *, max_tasks: int, max_task_state_ms: int, store: TaskStateStore):
        self._max_state_s = max_task_state_ms / 1000
        self.store = store
        self._tasks: TLRUCache[TaskRef, TaskInputs] = _ClosingTLRU(maxsize=max_tasks, ttu=self._deadline, timer=time.monotonic)
        self._listeners: dict[str, SessionListener] = {}
        self._ephemeral: set[str] = set()
        when_lost = getattr(store, "when_lost", None)
        if when_lost is not None:  # a shared store that may lose its data (decision 77)
            when_lost(self.restore)

    async def restore(self) -> int:
        """The shared store lost its data: every followed task puts back the requests this
        process captured (`TaskInputs.restore`); how many were put back."""
        self._tasks.expire()
        return sum([await inputs.restore() for inputs in list(self._tasks.values())])

    @staticmethod
    def _deadline(_ref: TaskRef, inputs: TaskInputs, now: float) -> float:
        return now + inputs.keep_s

    async def track(self, ref: TaskRef, session: UpstreamSession, headers: Mapping[str, str], *, ttl_ms: int | None = None) -> TaskInputs:
        """The input state of a task, created on first use and kept for the task's ttl (or
        `max_task_state_ms` when the ttl is null or longer), and the session's GET stream held."""
        inputs = self._tasks.get(ref)
        if inputs is None:
            keep_s = self._max_state_s if ttl_ms is None else min(ttl_ms / 1000, self._max_state_s)
            inputs = TaskInputs(ref, session, keep_s, self.store)
            self._tasks[ref] = inputs
            listener = self.listener(session, headers)
            if listener is not None:
                await listener.adopt(inputs)
        else:
            self.listener(session, headers)
        return inputs

    def listener(self, session: UpstreamSession, headers: Mapping[str, str]) -> SessionListener | None:
        """The session's GET-stream listener, started if it is not running (None without a session
        id; one that found no GET stream on the session is not started again)."""
        sid = session.session_id or ""
        if not sid:
            return None
        listener = self._listeners.get(sid)
        if listener is None or (listener.task.done() and not listener.no_stream):
            listener = self._listeners[sid] = SessionListener(session, self, headers)
        return listener

    async def listening(self, session: UpstreamSession, headers: Mapping[str, str], *, ephemeral: bool = False,
                        timeout_s: float = 5.0) -> None:
        """Make sure the session's GET stream is open before a task is created on it: some servers
        (FastMCP 3) drop what they send while no GET stream is connected. An `ephemeral` session
        (one per task) stops being listened to when its tasks have ended."""
        if ephemeral and session.session_id:
            self._ephemeral.add(session.session_id)
        listener = self.listener(session, headers)
        if listener is not None and not listener.ready.is_set():  # set: no waiter task to make
            try:
                await asyncio.wait_for(listener.ready.wait(), timeout_s)
            except TimeoutError:
                log.warning("GET stream of a session on %s did not open within %.1f s", session.backend.name, timeout_s)

    def get(self, ref: TaskRef) -> TaskInputs | None:
        return self._tasks.get(ref)

    def __len__(self) -> int:
        """Tasks whose input state is kept (expired ones are evicted first)."""
        return len(self._tasks)

    def find(self, session: UpstreamSession, task_id: Any) -> TaskInputs | None:
        """The followed task of `session` whose upstream id is `task_id`."""
        if not isinstance(task_id, str):
            return None
        for inputs in self.tasks_of(session):
            if inputs.ref.task == task_id:
                return inputs
        return None

    def tasks_of(self, session: UpstreamSession) -> list[TaskInputs]:
        sid = session.session_id or ""
        self._tasks.expire()
        return [t for t in self._tasks.values() if (t.session.session_id or "") == sid]

    async def finish(self, ref: TaskRef) -> None:
        """The task ended: stop holding its stream and requests."""
        inputs = self._tasks.pop(ref, None)
        if inputs is not None:
            await inputs.end()
            sid = inputs.session.session_id or ""
            if sid in self._ephemeral and not self.tasks_of(inputs.session):
                self._ephemeral.discard(sid)
                self.forget_session(inputs.session)

    def unsubscribe(self, listener: SessionListener, subscriber: Callable[[dict[str, Any]], None]) -> None:
        """`subscriber` no longer hears `listener`'s GET stream; a stream nobody hears and that
        carries no followed task is closed (each would hold a connection to the backend for
        nothing, one per pooled session ever listened to; decision 69)."""
        listener.subscribers.discard(subscriber)
        if not listener.subscribers and not self.tasks_of(listener.session) and self._listeners.get(listener.sid) is listener:
            del self._listeners[listener.sid]
            listener.close()

    def forget_session(self, session: UpstreamSession) -> None:
        """Stop listening on a session that will carry no more tasks."""
        listener = self._listeners.pop(session.session_id or "", None)
        if listener is not None:
            listener.close()

    def close(self) -> None:
        for listener in self._listeners.values():
            listener.close()
        self._listeners.clear()
        for inputs in list(self._tasks.values()):
            inputs.close()
        self._tasks.clear()
