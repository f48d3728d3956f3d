"""Virtual sessions over one supervised stdio process (docs/behaviour.md §7 "stdio backends").

A `ProcessSlot` runs one server process and keeps it running: it starts it, runs `initialize`
once with the capabilities of the slot, restarts it with backoff when it exits, and carries the
requests of many `VirtualSession`s over it. Ids and progress tokens are rewritten per request
(`translators.multiplex`); what the process sends is routed to the virtual session it belongs
to: a response to the request's own stream; a server→client request or notification by its
related task, progress token, the request it names, the task it names, or else the one session
with a request in flight that may ask (docs/decisions.md §56, §57). A session keeps the
tasks it created: another session's task is unknown to it, and its `tasks/list` shows its own only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from typing import Any, NamedTuple

from cachetools import LRUCache

from translators import jsonrpc, line_ids, multiplex
from translators.errors import INTERNAL_ERROR, NOT_OF_SESSION, McpError, backend_unavailable, unknown_task
from translators.protocol import LEGACY_VERSION

from ...eventloop import cancel_and_wait
from .channel import Channel, ChannelLaunch
from .liveness import Liveness
from .process import LongLine
from .session import Pending, VirtualSession
from .tasks import TaskOwners

log = logging.getLogger(__name__)

BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 30.0
STEADY_S = 10.0
"""A process that ran this long before exiting is restarted after `BACKOFF_FIRST_S` again."""
REAP_MARGIN_S = 1.0
"""Allowed beside a replaced process's two `grace_s` for its SIGKILL and reaping (`start_wait`)."""
INITIALIZE_TIMEOUT_S = 30.0
class Greeting(NamedTuple):
    """What the proxy's `initialize` of a stdio process declares: its `capabilities` and `clientInfo`."""

    capabilities: Mapping[str, Any]
    client_info: Mapping[str, Any]


class ProcessSlot:
    """One supervised process, run as `launch` says, and the virtual sessions over it; `greeting`
    is what the process's `initialize` declares; `on_down(reason)` is called each time the
    process is lost, `on_up()` each time it has answered `initialize`. `liveness_timeout_s`: how long
    it may write nothing while a request waits before it is taken as hung (0: never; `stdio_liveness`)."""

    def __init__(self, launch: ChannelLaunch, greeting: Greeting, *, on_down: Callable[[str], None], on_up: Callable[[], None],
                 liveness_timeout_s: float = 0.0):
        self.launch = launch
        self.name = launch.name
        self.capabilities, self.client_info = dict(greeting.capabilities), dict(greeting.client_info)
        self.liveness_timeout_s = liveness_timeout_s
        self.liveness: Liveness | None = None
        self.on_down, self.on_up = on_down, on_up
        self.ready = asyncio.Event()
        self.attempt_done = asyncio.Event()
        """Set when a start attempt has ended (answered `initialize`, or failed); cleared at each attempt."""
        self.starting = True
        self.attempt_begun = asyncio.Event()
        """Set while a start attempt is under way or done; cleared while a backoff is waited out."""
        self.retry_at: float | None = None
        """When the next start attempt begins (monotonic s) while a backoff is waited out, else None."""
        self.last_failure = "starting"
        self.start_failure: str | None = None
        """Why the first start failed for good, else None: the command could not be run, or its
        process exited before answering `initialize` (a proxy refuses to start on it: `Fleet.refresh_all`)."""
        self.initialize_result: dict[str, Any] = {}
        self.sessions: dict[str, VirtualSession] = {}
        self.opening = 0
        """`initialize`s waiting for this process's start to open a session on it (`ProcessPool.open_session`)."""
        self.process: Channel | None = None
        self.restarts = 0
        self.last_used = time.monotonic()
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._task_owner: TaskOwners[VirtualSession] = TaskOwners()
        self._token_owner: LRUCache[int, tuple[VirtualSession, jsonrpc.RequestId, int]] = LRUCache(maxsize=10_000)
        self._asked: LRUCache[jsonrpc.RequestId, VirtualSession] = LRUCache(maxsize=10_000)
        self._exited: asyncio.Event = asyncio.Event()
        self._closed = False
        self._supervisor: asyncio.Task[None] | None = None
        self._after: list[asyncio.Future[None]] = []
        """The stops of the processes this one replaces, while its start waits for them (decision 150)."""

    # -- supervision ---------------------------------------------------------------------------

    def start(self, after: Collection[asyncio.Future[None]] = ()) -> None:
        """Start supervising: the process is started in the background, once the stops `after`
        (of the processes it replaces) have ended (decision 150)."""
        self._after = [stop for stop in after if not stop.done()]
        self._supervisor = asyncio.ensure_future(self._supervise())

    async def _supervise(self) -> None:
        if self._after:
            await asyncio.wait(self._after)  # each stop ends with its process reaped (SIGKILL at the latest)
        self._after = []
        backoff = BACKOFF_FIRST_S
        while not self._closed:
            started = time.monotonic()
            self._exited.clear()
            self.starting = True
            self.retry_at = None
            self.attempt_done.clear()
            self.attempt_begun.set()
            reason = await self._run_once()
            self.starting = False
            self.last_failure = reason
            self.attempt_done.set()
            if self._closed:
                return
            self.ready.clear()
            self._lose_everything(reason)
            self.on_down(reason)
            if self.process is not None:
                await self.process.kill()  # found hung (one that exited is already reaped: nothing to do)
            if not self.launch.restarts:  # an upstream SSE session: its slot ends with it (decision 171)
                self._closed = True
                return
            backoff = BACKOFF_FIRST_S if time.monotonic() - started >= STEADY_S else backoff
            log.warning("backend %s: %s; starting it again in %.2f s", self.name, reason, backoff)
            self.attempt_begun.clear()
            self.retry_at = time.monotonic() + backoff
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
            self.restarts += 1

    async def _run_once(self) -> str:
        """Start the process, `initialize` it, and wait until it exits; returns why it stopped."""
        process = self.launch.open(on_message=self._from_process, on_exit=lambda code: self._exited.set(),
                                   on_long_line=self._long_line)
        self.liveness = None
        try:
            await process.start()
        except OSError as exc:
            if self.restarts == 0:
                self.start_failure = self.launch.cannot_start(exc)
            return self.launch.not_started(exc)
        self.process = process
        pending = Pending(None, None, "initialize", None)
        request_id = next(self._ids)
        self._pending[request_id] = pending
        params = {"protocolVersion": LEGACY_VERSION, "capabilities": self.capabilities, "clientInfo": self.client_info}
        process.send(jsonrpc.request(request_id, "initialize", params))
        answer = asyncio.ensure_future(pending.queue.get())
        exited = asyncio.ensure_future(self._exited.wait())
        done, _ = await asyncio.wait({answer, exited}, timeout=INITIALIZE_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        exited.cancel()
        self._pending.pop(request_id, None)
        if answer not in done:
            answer.cancel()
            exited_first = self._exited.is_set()  # read before the stop below ends the process
            await process.stop()
            if exited_first and self.restarts == 0:
                self.start_failure = process.ended_before_initialize()
            return f"{self.launch.gone} before answering initialize" if exited_first else \
                f"{self.launch.noun} did not answer initialize within {INITIALIZE_TIMEOUT_S:g} s"
        message, _ = answer.result()
        result = message.get("result")
        if not isinstance(result, dict) or not isinstance(result.get("capabilities"), dict):
            await process.stop()
            return f"initialize failed: {message.get('error')}"
        self.initialize_result = result
        process.send(jsonrpc.notification("notifications/initialized"))
        self.ready.set()
        self.starting = False
        self.attempt_done.set()
        self.on_up()
        if self.liveness_timeout_s > 0:
            self.liveness = Liveness(self.liveness_timeout_s, waiting=lambda: bool(self._pending), ids=self._ids,
                                     send_ping=lambda ping_id: process.send(jsonrpc.request(ping_id, "ping")))
            exited = asyncio.ensure_future(self._exited.wait())
            hung = asyncio.ensure_future(self.liveness.hung())
            try:
                await asyncio.wait({exited, hung}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                exited.cancel()
                hung.cancel()
            if not self._exited.is_set():
                return hung.result()  # the supervisor fails its requests, then kills it
        await self._exited.wait()
        return process.ended()

    def _lose_everything(self, reason: str) -> None:
        """The process is gone: every request in flight fails, every session is lost (its tasks
        are unknown from now on: a new process does not have them)."""
        error = backend_unavailable(self.name, reason)
        for pending in self._pending.values():
            pending.fail(error)
        self._pending.clear()
        for session in self.sessions.values():
            session.end()
        for book in (self.sessions, self._task_owner, self._token_owner, self._asked):
            book.clear()

    async def close(self) -> None:
        """Stop supervising and stop the process (EOF, SIGTERM, SIGKILL; reaped)."""
        self._closed = True
        if self._supervisor is not None:
            await cancel_and_wait(self._supervisor)
        if self.process is not None:
            await self.process.stop()
        if self._after:  # closed before it started: its stop ends when theirs do, for whoever waits on it
            await asyncio.wait(self._after)
        self.ready.clear()
        self.starting = False
        self.retry_at = None
        self.last_failure = "its process was stopped"
        self.attempt_begun.set()
        self.attempt_done.set()  # whoever waits for a start cancelled here is answered at once
        self._lose_everything("the proxy is stopping")

    @property
    def busy(self) -> bool:
        """Whether a request is in flight or a task created in the process may still be known to it."""
        self.forget_due(time.monotonic())
        return self.in_flight or bool(self._task_owner)

    def starts_within(self, wait_s: float) -> bool:
        """Whether the process is being started, or will be once a backoff ending within `wait_s` is over."""
        return self.starting or (self.retry_at is not None and self.retry_at - time.monotonic() <= wait_s)

    def start_wait(self, wait_s: float) -> float:
        """How long (s) a newcomer may wait for the start: `wait_s` for the start itself, after what
        is left of a backoff and, while the processes it replaces are being stopped, their stop
        (EOF, SIGTERM, SIGKILL: two `grace_s` at most) — so a healthy start is not cut short by the
        waits before it (decisions 149, 150)."""
        backoff = max(0.0, self.retry_at - time.monotonic()) if self.retry_at is not None else 0.0
        stopping = 2 * self.launch.grace_s + REAP_MARGIN_S if any(not stop.done() for stop in self._after) else 0.0
        return wait_s + backoff + stopping

    async def started(self) -> None:
        """Wait for the next start attempt to end (its backoff first, if one is waited out): the
        process ready, or the attempt failed (`last_failure`); at once when the slot is closed."""
        await self.attempt_begun.wait()
        await self.attempt_done.wait()

    @property
    def in_flight(self) -> bool:
        """Whether a request is in flight in the process (its tasks aside, which `busy` counts too)."""
        return bool(self._pending)

    def forget_due(self, now: float) -> None:
        """Forget the tasks past their time (decision 134): their sessions hold them no more."""
        self._task_owner.forget_due(now)

    # -- sessions ------------------------------------------------------------------------------

    def open_session(self) -> VirtualSession:
        """A new virtual session on the running process."""
        session = VirtualSession(uuid.uuid4().hex, self)
        self.sessions[session.id] = session
        self.last_used = time.monotonic()
        return session

    def end_session(self, session: VirtualSession) -> None:
        """Forget a session (DELETE, or idle: decision 140): its requests in flight are cancelled in
        the process and answered with an error at once (before, their POSTs waited for their timeout)."""
        ended = McpError(INTERNAL_ERROR, "The session was ended (DELETE) before this request was answered; it was cancelled")
        for request_id, pending in list(session.inflight.items()):
            self.cancel(session, request_id)
            pending.fail(ended)
        session.end()
        self.sessions.pop(session.id, None)
        for task in session.tasks:
            self._task_owner.pop(task)

    def request(self, session: VirtualSession, message: dict[str, Any], line: bytes | None = None) -> Pending:
        """Send a session's request (`line`: the JSON it was decoded from, if known, sent with the
        process's id where it can be, decision 130); its answer arrives on the returned `Pending`'s
        queue. A task request for a task this session did not create is answered "Unknown task" at
        once (never sent), and so is every request when the process is not running."""
        self.last_used = time.monotonic()
        method = message.get("method", "")
        task = multiplex.task_param(message)
        pending = Pending(session, message.get("id"), method, task)
        if task is not None and task not in session.tasks:
            pending.fail(unknown_task(NOT_OF_SESSION))
            return pending
        request_id = next(self._ids)
        token = multiplex.progress_token(message)
        new_token = None
        if token is not None:
            new_token = next(self._tokens)
            self._token_owner[new_token] = (session, token, request_id)
        if method == "resources/subscribe" and isinstance((message.get("params") or {}).get("uri"), str):
            session.subscriptions.add(message["params"]["uri"])
        elif method == "resources/unsubscribe":
            session.subscriptions.discard((message.get("params") or {}).get("uri"))
        self._pending[request_id] = pending
        session.inflight[request_id] = pending
        if self.process is None or not self.ready.is_set() or not self._send_request(message, request_id, new_token, line):
            self._pending.pop(request_id, None)
            session.inflight.pop(request_id, None)
            pending.fail(backend_unavailable(self.name, "the process is not running"))
            return pending
        if self.liveness is not None:
            self.liveness.sent()
        if session.backlog and method not in multiplex.QUIET_METHODS:
            session.flush_backlog(pending)
        return pending

    def _send_request(self, message: dict[str, Any], request_id: int, token: int | None, line: bytes | None) -> bool:
        assert self.process is not None
        if line is not None and token is None:
            line = line.strip()
            if b"\n" not in line and b"\r" not in line:
                out = multiplex.line_with_id(line, message.get("id"), request_id)  # type: ignore[arg-type]
                if out is not None:
                    return self.process.send_line(out)
        return self.process.send(multiplex.to_process(message, request_id, token))

    def done(self, session: VirtualSession, pending: Pending) -> None:
        """The POST carrying `pending` has ended (answered, or its client went away)."""
        session.last_used = time.monotonic()
        for request_id, candidate in list(session.inflight.items()):
            if candidate is pending:
                session.inflight.pop(request_id, None)
                self._pending.pop(request_id, None)

    def cancel(self, session: VirtualSession, request_id: int) -> None:
        """Tell the process a session's request is abandoned (`notifications/cancelled`)."""
        pending = session.inflight.pop(request_id, None)
        self._pending.pop(request_id, None)
        if pending is not None and self.process is not None:
            self.process.send(jsonrpc.notification("notifications/cancelled", {"requestId": request_id, "reason": "client disconnected"}))

    def process_id_of(self, session: VirtualSession, client_id: Any) -> int | None:
        """The process's id for a session's request still in flight (the client's `client_id`)."""
        for request_id, pending in session.inflight.items():
            if pending.client_id == client_id:
                return request_id
        return None

    def notify(self, session: VirtualSession, message: dict[str, Any]) -> None:
        """A session's notification: `initialized` was sent once for the process; a
        `notifications/cancelled` names the process's id; others go as they are."""
        method = message.get("method")
        if method == "notifications/initialized" or self.process is None:
            return
        if method == "notifications/cancelled":
            request_id = self.process_id_of(session, (message.get("params") or {}).get("requestId"))
            if request_id is None:
                return
            message = multiplex.cancelled_to_process(message, request_id)
        self.process.send(message)

    def answer(self, session: VirtualSession, message: dict[str, Any]) -> bool:
        """A session's response to a server→client request; sent only when that request was put
        to this session. Returns whether it was."""
        if self._asked.get(message.get("id")) is not session or self.process is None:
            log.warning("backend %s: an answer to a request not put to this session was dropped", self.name)
            return False
        self._asked.pop(message.get("id"), None)
        return self.process.send(message)

    # -- routing what the process sends --------------------------------------------------------

    def _from_process(self, message: dict[str, Any], line: bytes | None = None) -> None:
        """One message from the process (`line`: the bytes it was decoded from, when they are
        UTF-8 text that may be passed on as they are)."""
        if self.liveness is not None:
            self.liveness.heard()
        if "method" not in message:
            self._response(message, line)
            return
        if "id" in message and message.get("method") == "ping":
            if self.process is not None:
                self.process.send(jsonrpc.result_response(message["id"], {}))
            return
        route = multiplex.route_of(message)
        is_request = "id" in message
        session, prefer = self._owner(route, message)
        if session is None:
            if is_request and self.process is not None:
                log.warning("backend %s: cannot tell which client %s is for; refused", self.name, message.get("method"))
                error = McpError(INTERNAL_ERROR, "No client of this proxy can be told apart as the one this request is for")
                self.process.send(jsonrpc.error_response(message["id"], error))
            return
        if is_request:
            self._asked[message["id"]] = session
        if route.kind == "progress" and isinstance(route.key, int):
            owner = self._token_owner.get(route.key)
            if owner is not None:
                message = multiplex.with_progress_token(message, owner[1])
        elif route.kind == "task" and isinstance(route.key, str) and multiplex.terminal(message.get("params")):
            session.running_tasks.discard(route.key)
        for each in ([session] if route.kind != "broadcast" else []):
            each.deliver(message, prefer)

    def _owner(self, route: multiplex.Route, message: dict[str, Any]) -> tuple[VirtualSession | None, Pending | None]:
        """The session a message belongs to and the request in flight to prefer (None, None when
        none can be told: broadcasts and resource updates are delivered here directly)."""
        creator = self._task_owner.get(route.key) if route.kind == "task" and isinstance(route.key, str) else None
        if creator is not None:
            # The task's own stream is a request naming it that may carry its messages (its
            # `tasks/result`); never a `tasks/get` or `tasks/cancel`, whose readers take only their
            # answer, as over HTTP, where servers put nothing else there (docs/decisions.md §129).
            prefer = next((p for p in creator.inflight.values()
                           if p.task == route.key and p.method not in multiplex.QUIET_METHODS), None)
            return creator, prefer
        if route.kind == "progress" and isinstance(route.key, int):
            owner = self._token_owner.get(route.key)
            if owner is None:
                return None, None
            return owner[0], owner[0].inflight.get(owner[2])
        if route.kind == "server-request":
            return self._asked.get(route.key), None  # type: ignore[arg-type]
        if route.kind in ("broadcast", "resource"):
            for session in list(self.sessions.values()):
                if route.kind == "broadcast" or route.key in session.subscriptions:
                    session.deliver(message)
            return None, None
        # No key in the message (a server that leaves out the related task): the one session that
        # may be asking, if there is only one: with a request in flight that may ask, or with a
        # task not seen finished (docs/decisions.md §56, §57). Two or more: refused.
        asking = [p for p in self._pending.values() if p.session is not None and p.method not in multiplex.QUIET_METHODS]
        candidates = {id(p.session): p.session for p in asking if p.session is not None}
        candidates.update({id(s): s for s in self._task_owner.values() if s.running})
        if len(candidates) == 1:
            session = next(iter(candidates.values()))
            return session, next((p for p in reversed(asking) if p.session is session), None)
        return None, None

    def _long_line(self, line: LongLine) -> None:
        """A stdout line over `max_line_bytes`, not kept: when its ends show the response to a
        request in flight, that request is answered with an error naming the limit
        (docs/decisions.md §72) rather than left waiting."""
        if self.liveness is not None:
            self.liveness.heard()
        request_id = line_ids.response_id(line.head, line.tail)
        if not isinstance(request_id, int) or request_id not in self._pending:
            return
        error = McpError(INTERNAL_ERROR, f"Backend {self.name!r}: its response was {line.size} bytes long, "
                                         f"over max_line_bytes ({self.launch.max_line_bytes}); it was not kept")
        log.warning("backend %s: the response to request %d was over %d bytes; answered with an error", self.name, request_id,
                    self.launch.max_line_bytes)
        self._response(jsonrpc.error_response(request_id, error))

    def _response(self, message: dict[str, Any], line: bytes | None = None) -> None:
        request_id = message.get("id")
        if self.liveness is not None and self.liveness.answered(request_id):
            return
        pending = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
        if pending is None:
            log.warning("backend %s: a response to no request in flight (id %r) skipped", self.name, request_id)
            return
        session = pending.session
        if session is not None:
            session.inflight.pop(request_id, None)  # type: ignore[arg-type]
            result = message.get("result")
            task = multiplex.created_task(result)
            if task is not None:
                self._task_owner.add(task, session, multiplex.created_task_ttl_ms(result), time.monotonic())
            elif pending.task is not None and multiplex.terminal(result):
                session.running_tasks.discard(pending.task)
            elif pending.method == "tasks/list" and isinstance(result, dict):
                message = {**message, "result": multiplex.own_tasks(result, session.tasks.__contains__)}
                line = None
            message = multiplex.to_client(message, pending.client_id)
            if line is not None:
                pending.line = (line, request_id)  # type: ignore[assignment]
        pending.queue.put_nowait((message, True))
        if session is not None:
            # A question put on this stream and still unanswered when the response came (a task's
            # work that asked while the call creating it was in flight): the client's reader of
            # that stream is gone, so it is offered again on the session's other streams.
            for question in pending.questions:
                if self._asked.get(question["id"]) is session:
                    session.deliver(question)
