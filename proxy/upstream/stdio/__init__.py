"""The connector of a stdio backend: a server process the proxy starts (docs/behaviour.md §7).

A stdio server is a session-wire backend with one session per process. So that every pairing,
the relays and the probe reach it exactly as they reach an HTTP session-wire backend, the
connector serves it as one (docs/decisions.md §55, §58, §70): `StdioEndpoint` is an `Endpoint`
whose transport is a Streamable HTTP endpoint run in the proxy's own event loop on a private Unix
socket (in a directory only the proxy's user may open, mode 0700; no TCP port), where each
`initialize` opens a virtual session (`stdio_session.VirtualSession`) over one of a small pool of
processes (`ProcessPool`), keyed by `process_scope`: "shared" (one process), "capabilities"
(one per set of input capabilities declared: elicitation, sampling, roots) or "principal" (one
per caller's `Authorization`), at most `max_processes` (docs/decisions.md §71). The proxy's own
probe is told apart by a secret header only this process knows (`probe_headers`), never by
anything a client sends. A POST is answered as JSON when the response comes first, else as an
SSE stream carrying what the process sends for it first.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import tempfile
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from translators import jsonrpc
from translators.errors import INTERNAL_ERROR, McpError, backend_unavailable
from translators.sealing import ANONYMOUS

from ...config import Upstream
from ...observe.hooks import TRACE
from ..endpoint import BackendUnreachable, Endpoint
from .bridge import CALLER_HEADER, OWN_HEADER, PROBE_HEADER, Bridge, BridgeResponse
from .channel import ChannelLaunch
from .mux import Greeting, ProcessSlot
from .process import Launch
from .session import VirtualSession

log = logging.getLogger(__name__)

START_WAIT_S = 10.0
"""How long an `initialize` waits for its process to be (re)started before failing (HTTP 502)."""
BRIDGE_URL = "http://stdio.invalid/mcp"
"""The URL requests to the bridge are made to; the connection goes to its Unix socket whatever the host."""
KEYED_CAPABILITIES = ("elicitation", "sampling", "roots")
"""The client capabilities a process's `initialize` must match under `process_scope = "capabilities"`."""


class ProcessPool:
    """The processes of one stdio backend and every virtual session over them.

    Bounds (docs/decisions.md §71): at most `max_processes` in all and `principal_processes` started
    for one principal (the proxy's principal of the caller, which the proxy names on `initialize`,
    decision 144; else a hash of its `Authorization`; a process the probe started is nobody's).
    A new process beyond the first bound replaces the least recently used one that holds no
    session (the probe's aside), no request in flight and no task, and beyond the second bound
    such a process of the same principal; else the `initialize` is refused (-32603, HTTP 503,
    naming the bound): another principal's live state is never stopped to make room.

    A session with no request in flight and no GET stream open ends after `idle_s` seconds
    unused, as the proxy's own sessions do after `session_idle_ms` (decision 140): its next
    request is 404, and what it held no longer keeps a process from being replaced. Idle sessions
    are swept when a bound is reached and, at most every quarter of `idle_s`, when a session
    opens (so sessions that are never used again cost memory for about `idle_s` at most). The
    sessions the proxy's own face opens (`kept`) are not ended for being idle, except those of one
    process when a bound is reached and they hold no task (`_spare`, decision 145): the proxy
    opens them again when next needed. A task whose outcome the modern face has stored is not
    held (`outcome_kept`, `VirtualSession.holds_tasks`, decision 147).
    """

    def __init__(self, config: Upstream, endpoint: StdioEndpoint, *, idle_s: float = 3600.0, scope: str | None = None,
                 bounds: tuple[int, int] | None = None):
        self.config = config
        self.endpoint = endpoint
        self.idle_s = idle_s
        self.scope = scope or config.process_scope
        """`process_scope`, or "session" (an HTTP+SSE backend: one upstream session per session, decision 171)."""
        self.max_slots, self.principal_slots = bounds or (config.max_processes, config.principal_processes)
        """The most slots (processes, upstream SSE sessions) in all, and started for one principal."""
        self.units = "upstream SSE sessions" if self.scope == "session" else "processes"
        self._swept = time.monotonic()
        self.slots: OrderedDict[str, ProcessSlot] = OrderedDict()
        self.owners: dict[str, str | None] = {}
        """Process key → the principal it was started for (None: started for the probe)."""
        self.sessions: dict[str, VirtualSession] = {}
        self.probe_sessions: set[str] = set()
        """Ids of the virtual sessions the proxy's probe opened (they hold no process)."""
        self._stopping: set[asyncio.Future[None]] = set()

    @staticmethod
    def principal(authorization: str | None) -> str:
        """Who a caller the proxy did not name is, to the pool: a hash of its `Authorization`, or
        `ANONYMOUS` without one (as the proxy's `Keyring.principal` names that caller too)."""
        if not authorization:
            return ANONYMOUS
        return hashlib.sha256(authorization.encode("utf-8", "surrogatepass")).hexdigest()[:24]

    def key(self, capabilities: Mapping[str, Any], owner: str) -> str:
        """Which process a session with these `initialize` capabilities for this caller (`owner`,
        see `open_session`) goes to."""
        scope = self.scope
        if scope == "session":
            return "session:" + uuid.uuid4().hex
        if scope == "shared":
            return "shared"
        if scope == "principal":
            return "principal:" + owner
        kept = {name: capabilities[name] for name in KEYED_CAPABILITIES if name in capabilities}
        return "capabilities:" + json.dumps(kept, sort_keys=True, separators=(",", ":"))

    def _holds_sessions(self, slot: ProcessSlot) -> bool:
        """Whether a process carries a session other than the probe's, a request or a task, or a
        session is being opened on it (a newcomer waits for its start)."""
        return slot.busy or slot.opening > 0 or any(session_id not in self.probe_sessions for session_id in slot.sessions)

    def _spare(self, keys: list[str]) -> str | None:
        """The least recently used process of `keys` that holds nothing; else the least recently
        used one with no request in flight whose only sessions are the proxy's own, idle for
        `idle_s` and holding no task (`_idle`), which are ended for it (decision 145: one process
        per newcomer, not every such session); None when every one holds a caller's work. Idle relayed sessions are ended first."""
        self.expire_idle()
        spare = next((key for key in keys if not self._holds_sessions(self.slots[key])), None)
        if spare is not None:
            return spare
        now = time.monotonic()
        for key in keys:
            slot = self.slots[key]
            slot.forget_due(now)
            if slot.opening > 0 or slot.in_flight:
                continue  # whether a task still holds it is its session's to say (`_idle`, decision 147)
            held = [session for session_id, session in slot.sessions.items() if session_id not in self.probe_sessions]
            if all(self._idle(session, now, kept_too=True) for session in held):
                for session in held:
                    self.end(session)
                log.info("backend %s: %d of the proxy's own session(s) idle for %g s ended to start another process",
                         self.config.name, len(held), self.idle_s)
                return key
        return None

    def _make_room(self, owner: str | None) -> list[asyncio.Future[None]]:
        """Check the bounds for one more process started for `owner`, replacing a process that
        holds nothing (`_spare`) when a bound is reached; returns the stops of the processes
        replaced, which the new one starts after (decision 150). Raises `McpError` (-32603, HTTP
        503) naming the bound."""
        name = self.config.name
        stops = []
        if owner is not None:
            started = [key for key, started_for in self.owners.items() if started_for == owner]
            if len(started) >= self.principal_slots:
                spare = self._spare([key for key in self.slots if key in started])
                if spare is None:
                    raise McpError(INTERNAL_ERROR, f"Backend {name!r}: {len(started)} of its {self.units} already run "
                                   f"for this caller (max_processes_per_principal = {self.principal_slots}); no other is "
                                   "started", http_status=503)
                stops.append(self._stop(spare))
        if len(self.slots) < self.max_slots:
            return stops
        spare = self._spare(list(self.slots))
        if spare is None:
            raise McpError(INTERNAL_ERROR, f"Backend {name!r}: all {self.max_slots} of its {self.units} hold other "
                           f"callers' sessions (max_processes = {self.max_slots}); no other is started",
                           http_status=503)
        stops.append(self._stop(spare))
        return stops

    def _stop(self, key: str, *, replaced: bool = True) -> asyncio.Future[None]:
        """Stop the process `key`, which holds nothing, in the background (`replaced`: to start
        another; else an upstream SSE session whose session ended); returns the stop."""
        evicted = self.slots.pop(key)
        self.owners.pop(key, None)
        if replaced:
            log.info("backend %s: stopping a process that holds no session to start another", self.config.name)
        stopping = asyncio.ensure_future(evicted.close())
        self._stopping.add(stopping)
        stopping.add_done_callback(self._stopping.discard)
        return stopping

    def _slot(self, key: str, capabilities: Mapping[str, Any], client_info: Mapping[str, Any], owner: str | None) -> ProcessSlot:
        slot = self.slots.get(key)
        if slot is not None:
            self.slots.move_to_end(key)
            return slot
        stops = self._make_room(owner)
        config = self.config

        def down(reason: str) -> None:
            if not slot.launch.restarts and self.slots.get(key) is slot:  # an upstream SSE session ends with its slot
                self.slots.pop(key)
                self.owners.pop(key, None)
            self.endpoint.process_down(reason)

        slot = ProcessSlot(self.endpoint.launch(), Greeting(capabilities, client_info), on_down=down, on_up=lambda: None,
                           liveness_timeout_s=config.liveness_timeout_ms / 1000)
        self.slots[key] = slot
        self.owners[key] = owner
        slot.start(after=stops)  # never more processes than max_processes, a replaced one's last seconds included
        return slot

    async def open_session(self, params: Mapping[str, Any], authorization: str | None, *, probe: bool = False,
                           kept: bool = False, caller: str | None = None) -> VirtualSession:
        """A virtual session for an `initialize` with these params, on a running process. The
        proxy's own probe (`probe`: it showed the connector's secret, never a client's say) joins
        any running process, else one being started, and starts one only when there is none.
        `kept`: a session of the proxy's own session face, ended only to make room (`_spare`). `caller`:
        the proxy's principal of the caller (its identity header's, decision 144), who the session
        and any process it starts are for; None: a hash of `authorization` stands for it.
        Raises `McpError`: HTTP 503 when a bound refuses a new process, HTTP 502 when none is
        running in time."""
        capabilities = params.get("capabilities") if isinstance(params.get("capabilities"), dict) else {}
        client_info = params.get("clientInfo") if isinstance(params.get("clientInfo"), dict) else {}
        slot = None
        if probe and self.scope != "session":
            slot = next((s for s in reversed(self.slots.values()) if s.ready.is_set()), None) \
                or next((s for s in reversed(self.slots.values()) if s.starting), None)
        if slot is None:
            owner = caller or self.principal(authorization)
            key = "probe" if probe and self.scope == "session" else self.key(capabilities, owner)
            slot = self._slot(key, capabilities, client_info, None if probe else owner)
        # Being started, or (a caller's, not the probe's: it reports what is) restarted soon: wait (§149).
        if not slot.ready.is_set() and (slot.starting if probe else slot.starts_within(START_WAIT_S)):
            slot.opening += 1  # not a spare for another newcomer meanwhile
            try:
                await asyncio.wait_for(slot.started(), slot.start_wait(START_WAIT_S))
            except TimeoutError:
                pass
            finally:
                slot.opening -= 1
        if not slot.ready.is_set():
            raise backend_unavailable(self.config.name, "its process is still starting" if slot.starting else slot.last_failure)
        if time.monotonic() - self._swept >= self.idle_s / 4:
            self.expire_idle()
        session = slot.open_session()
        session.kept = kept
        self.sessions[session.id] = session
        if probe:
            self.probe_sessions.intersection_update(self.sessions)
            self.probe_sessions.add(session.id)
        return session

    def get(self, session_id: str) -> VirtualSession | None:
        """The live session with this id (its use begins now), None when unknown, lost with its
        process, or ended by this call for being idle longer than `idle_s`."""
        session = self.sessions.get(session_id)
        if session is None or session.lost:
            self.sessions.pop(session_id, None)
            return None
        now = time.monotonic()
        if self._idle(session, now):
            self.end(session)
            return None
        session.last_used = now
        return session

    def _idle(self, session: VirtualSession, now: float, *, kept_too: bool = False) -> bool:
        """Unused for `idle_s` with nothing in flight and no GET stream open; a session of the
        proxy's own face (`kept`) only when `kept_too` (a bound asks) and it holds no task (none
        but those whose outcome its face keeps: `outcome_kept`, decision 147), its GET stream then
        not counted: that is the proxy's own listener, not a client (decision 145)."""
        if session.inflight or now - session.last_used < self.idle_s:
            return False
        if session.kept:
            return kept_too and not session.holds_tasks
        return session.stream is None

    def outcome_kept(self, session_id: str | None, task: str) -> None:
        """The proxy's own face has stored `task`'s outcome for as long as the process promised to
        keep the task: a task of a kept session whose outcome is kept does not hold the process
        under a bound (decision 147)."""
        session = self.sessions.get(session_id) if session_id else None
        if session is not None and session.kept and task in session.tasks:
            session.settled.add(task)

    def touch(self, session_id: str) -> None:
        """A request of the session was answered without reaching the process (a held task's, by
        the proxy): it is in use all the same (decision 140)."""
        self.get(session_id)  # renewed, or ended when it was idle already (as its next request would find it)

    def end(self, session: VirtualSession) -> None:
        """End a session (its DELETE, or idle): its requests in flight are cancelled in the process."""
        slot = session.slot
        slot.end_session(session)
        self.sessions.pop(session.id, None)
        self.probe_sessions.discard(session.id)
        if self.scope == "session" and not slot.sessions:  # its upstream session ends with it (decision 171)
            key = next((key for key, held in self.slots.items() if held is slot), None)
            if key is not None:
                self._stop(key, replaced=False)

    def expire_idle(self) -> int:
        """End every relayed session idle longer than `idle_s` (decision 140); returns how many."""
        now = self._swept = time.monotonic()
        idle = [session for session in self.sessions.values() if self._idle(session, now)]
        for session in idle:
            self.end(session)
        if idle:
            log.info("backend %s: %d relayed session(s) idle for %g s ended", self.config.name, len(idle), self.idle_s)
        return len(idle)

    async def close(self) -> None:
        """Stop every process (and wait for those being stopped)."""
        await asyncio.gather(*(slot.close() for slot in self.slots.values()), *self._stopping)
        self.slots.clear()
        self.owners.clear()
        self.sessions.clear()
        self.probe_sessions.clear()


class StdioEndpoint(Endpoint):
    """An `Endpoint` whose backend is a stdio server the proxy runs (see the module docstring).
    Its bridge starts with the first POST, on a Unix socket in a new 0700 directory, reached by a
    client session of its own (`http`); `close()` stops every process and removes the socket. No
    health check: the bridge always accepts, and a lost process marks the backend down itself."""

    HEALTH_CHECKS = False
    TAKES_PARSED = True
    KNOWS_CALLERS = False  # the process gets no Authorization: the proxy binds its relayed sessions (decision 138)
    PROBE_TIMEOUT_S = None  # the process's start wait and liveness bound it (decision 72)

    def __init__(self, config: Upstream, http: aiohttp.ClientSession, *, request_timeout_ms: int = 300_000,
                 session_idle_ms: int = 3_600_000):
        super().__init__(config.name, BRIDGE_URL, http, extra_headers=config.headers,
                         request_timeout_ms=request_timeout_ms)
        self.config = config
        self.pool = ProcessPool(config, self, idle_s=session_idle_ms / 1000, scope=self.scope, bounds=self.bounds)
        self.probe_headers = {PROBE_HEADER: secrets.token_urlsafe(32)}
        self.own_session_headers = {OWN_HEADER: self.probe_headers[PROBE_HEADER]}
        self.bridge = Bridge(self.pool, self.probe_headers[PROBE_HEADER], config.max_line_bytes)
        self._runner: web.AppRunner | None = None
        self._closed = False
        self.socket_path: str | None = None
        """The bridge's Unix socket, in a directory of mode 0700 of its own (None until started)."""
        self._starting = asyncio.Lock()

    @property
    def scope(self) -> str:
        """How sessions are spread over processes (`process_scope`)."""
        return self.config.process_scope

    @property
    def bounds(self) -> tuple[int, int]:
        """The most processes in all, and started for one principal."""
        return self.config.max_processes, self.config.principal_processes

    def launch(self) -> ChannelLaunch:
        """How each of the pool's processes is run."""
        config = self.config
        assert config.command is not None
        return Launch(config.name, config.command, config.env, config.cwd, config.max_line_bytes, config.stop_grace_ms / 1000)

    def caller_headers(self, principal: str) -> Mapping[str, str]:
        return {CALLER_HEADER: self.bridge.caller_value(principal)}

    def outcome_kept(self, session_id: str | None, task: str) -> None:
        self.pool.outcome_kept(session_id, task)

    @property
    def address(self) -> str:
        """The backend's command (`stdio: ARGV`), for logs and profiles."""
        return self.config.address

    @property
    def starting(self) -> bool:
        """Whether a process is being started for the first time and none has answered `initialize`."""
        slots = self.pool.slots.values()
        return any(slot.starting and slot.restarts == 0 for slot in slots) and not any(slot.ready.is_set() for slot in slots)

    @property
    def start_failure(self) -> str | None:
        """Why the first start of a process failed for good (`ProcessSlot.start_failure`): at the
        proxy's start, or when a reload adds the backend, that refuses it (`Fleet.refresh_all`)."""
        return next((slot.start_failure for slot in self.pool.slots.values() if slot.start_failure), None)

    async def ensure_started(self) -> None:
        """Start the bridge (once): its socket and the client session that reaches it."""
        if self._runner is not None:
            return
        async with self._starting:
            if self._runner is not None:
                return
            bridge = self.bridge
            app = web.Application(client_max_size=self.config.max_line_bytes)
            app.router.add_post("/mcp", bridge.post)
            app.router.add_get("/mcp", bridge.get, allow_head=False)
            app.router.add_delete("/mcp", bridge.delete)
            runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
            await runner.setup()
            path = os.path.join(tempfile.mkdtemp(prefix="mcp-tasks-proxy-stdio-"), "bridge.sock")  # mode 0700
            await web.UnixSite(runner, path).start()
            os.chmod(path, 0o600)
            self.socket_path = path
            self.http = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=path, limit=0), auto_decompress=True,
                                              cookie_jar=aiohttp.DummyCookieJar())
            self._runner = runner

    async def post(self, body: bytes, headers: Mapping[str, str], *, idempotent: bool = False,  # type: ignore[override]
                   lean: bool = True, parsed: dict[str, Any] | jsonrpc.Message | None = None) -> BridgeResponse:
        """POST `body` to the bridge in this event loop, without the socket (docs/decisions.md §116):
        the answer a `BridgeResponse`. Traced like any upstream POST. Raises `McpError` (HTTP 502)
        once the connector is closed."""
        if self._runner is None:
            await self.ensure_started()  # GET streams and DELETEs still go over the socket
        trace = TRACE.get()
        if trace is not None:
            return await trace.upstream(self, body, dict(headers), self._answer)  # type: ignore[no-any-return]
        return await self._answer(body, headers, parsed)

    async def _answer(self, body: bytes, headers: Mapping[str, str], parsed: dict[str, Any] | jsonrpc.Message | None = None) -> BridgeResponse:
        if self._closed:
            raise backend_unavailable(self.name, "cannot reach it (its connector is closed)")
        if self.extra_headers:
            all_headers = CIMultiDict(self.extra_headers)
            all_headers.update(headers)
        else:
            all_headers = CIMultiDict(headers)
        timeout_s = self.request_timeout_s
        bridge = self.bridge
        answer = await bridge.answer(body, all_headers, timeout_s, parsed=parsed)
        if answer.refusal is not None:
            raise answer.refusal  # never the process's: the proxy's refusal, or no process to send it to (§148, §149)
        return BridgeResponse(answer, timeout_s, bridge.deadlines)

    def session_used(self, session_id: str) -> None:
        self.pool.touch(session_id)

    def process_down(self, reason: str) -> None:
        """A process was lost: the backend is down until a probe answers again (`/readyz`)."""
        error = backend_unavailable(self.name, reason)
        self.on_unreachable(BackendUnreachable(error.code, error.message, http_status=502))
        self.on_trouble()

    async def close(self) -> None:
        """Stop every process (EOF, SIGTERM, SIGKILL; reaped), the bridge and its socket."""
        self._closed = True
        await self.pool.close()
        if self._runner is not None:
            await self.http.close()
            await self._runner.cleanup()
            self._runner = None
        if self.socket_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(self.socket_path))
            self.socket_path = None
