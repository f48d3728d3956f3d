"""A v1 session in front of a v2-session backend: the upstream session of its own, and what that
session's GET stream carries (docs/behaviour.md §5, §5.1, §5.9; docs/decisions.md §68).

**How a v1 session maps onto upstream sessions.** Every v1 session gets one upstream session of
its own: the backend's `SessionPool` keys it by the v1 session's id (unique, sealed for its
principal) instead of by principal, so it is never shared with another v1 session, not even one
of the same principal, nor with the principal-keyed sessions of v2-modern clients
(`V2OverV2Session`). It declares the session's input capabilities and the tasks extension. What is
session state on the session wire is therefore the v1 session's own, as it would be talking to the
backend directly: `logging/setLevel` and `resources/subscribe`/`unsubscribe` are forwarded to it
(the proxy keeps the level and the URIs with the session too, and sets them again on a new
upstream session: after a restart, or when the backend forgot the old one). A task's id is sealed
with the upstream session that created it, so `tasks/*` reach that session from any session of
the principal, and after a restart (`OwnClient`).

**Why a notification can never reach another client's session.** The only upstream stream read
for a v1 session's GET stream is the GET stream of the upstream session created for that one v1
session (`_hold`, started by `watch` with that session); whatever it carries goes to that
session's `notify` and nowhere else: there is no table from upstream streams to v1 sessions that
could name a second one, and no other v1 session's requests ever go to that upstream session, so
the backend has no reason to put another client's changes, updates or log messages there. What
passes is `translators.subscriptions.own_stream_notification`: list changes the backend declares
`listChanged` for, `notifications/resources/updated` for the session's URIs, log messages at or
above its level. The GET stream is held (one per v1 session, at most) only while the v1 session
holds its own GET stream open, and only in front of a backend that declares list changes,
resource subscriptions or `logging`. When the backend ends it, or the connection breaks, it is
opened again after `stream_hold.RETRY_S` (doubling up to `MAX_RETRY_S`) while the v1 stream stays open; a
backend without a GET stream (405) is not asked again for that stream. A request of the session
that goes upstream while the stream is being opened waits for the backend to answer it (at most
`v1_lists.READY_WAIT_S` per stream), so a change the request causes is heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import Callable
from typing import Any

from cachetools import LRUCache

from translators.envelope import ModernMeta, strip_envelope
from translators.errors import FORGOTTEN, INTERNAL_ERROR, McpError, unknown_task
from translators.streaming import set_level_params
from translators.subscriptions import listen_filter_v1, own_stream_notification

from ..faces.session import ProxySession
from ..upstream.session_wire import (
    NoStandaloneStream,
    NotificationHandler,
    ServerRequestHandler,
    SessionLost,
    UpstreamSession,
    refuse_server_request,
)
from ..upstream.session_wire import listen as listen_upstream
from ..upstream.v2_session_wire import session_capabilities
from . import v1_lists
from .stream_hold import Backoff, hold
from .v1_lists import SUBSCRIBED

log = logging.getLogger(__name__)

LOG_LEVEL = "logLevel"
"""The key of `ProxySession.state` under which a v1 session's `logging/setLevel` level is kept."""
OWNER = "v1-session:"
"""Prefix of the pool key of a v1 session's own upstream session (principals are hex or `anonymous`)."""


class _Stream:
    """One v1 session's hold on its upstream session's GET stream: the v1 stream's end, the
    headers, whether requests need not wait (`ready`), and the task holding it."""

    def __init__(self, ended: asyncio.Event, headers: dict[str, str]):
        self.ended = ended
        self.headers = headers
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class OwnSessions:
    """The own upstream sessions of one `V1OverV2`'s sessions on a v2-session backend, and their
    GET streams. `backend` is the member's `Backend`; `meta_of(session)` the session's envelope."""

    def __init__(self, backend: Any, meta_of: Callable[[ProxySession], ModernMeta], *, max_sessions: int = 10_000):
        self.backend = backend
        self.meta_of = meta_of
        self._set_up: LRUCache[str, UpstreamSession] = LRUCache(maxsize=max_sessions)
        """v1 session id → the upstream session its level and URIs were last set on."""
        self._streams: dict[str, _Stream] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def declared(self) -> dict[str, Any]:
        """The capabilities of the backend as last probed when it is a v2-session one, else `{}`."""
        profile = self.backend.profile
        return profile.capabilities if profile is not None and profile.dialect == "v2-session" else {}

    def subscribes(self) -> bool:
        """Whether the (v2-session) backend declares `resources.subscribe`."""
        return "resourceSubscriptions" in listen_filter_v1(self.declared(), [""])

    def logs(self) -> bool:
        """Whether the (v2-session) backend declares `logging`."""
        return isinstance(self.declared().get("logging"), dict)

    def carries(self) -> bool:
        """Whether the (v2-session) backend declares anything its sessions' GET streams carry for a
        v1 session: list changes, resource subscriptions or `logging`."""
        return bool(listen_filter_v1(self.declared(), [""])) or self.logs()

    # -- the session's own upstream session ----------------------------------------------------------------

    async def own(self, session: ProxySession, headers: dict[str, str]) -> UpstreamSession:
        """The v1 session's own upstream session, opened on first use (and again when the backend
        forgot it); a new one gets the session's level and URIs first."""
        upstream = await self.backend.pool.shared(OWNER + session.id, session_capabilities(self.meta_of(session)), headers,
                                                  caller=session.principal)
        if self._set_up.get(session.id) is not upstream:
            self._set_up[session.id] = upstream
            await self._set_again(session, upstream, headers)
        return upstream

    async def _set_again(self, session: ProxySession, upstream: UpstreamSession, headers: dict[str, str]) -> None:
        level = session.state.get(LOG_LEVEL)
        try:
            if level is not None and self.logs():
                await upstream.request("logging/setLevel", set_level_params(level), headers=headers)
            if self.subscribes():
                for uri in session.state.get(SUBSCRIBED) or ():
                    await upstream.request("resources/subscribe", {"uri": uri}, headers=headers)
        except McpError as exc:  # the session goes on; what the backend refused now it refused before too
            log.info("backend %s refused the level or URIs of a v1 session on its new upstream session: %s", self.backend.name,
                     exc.message)

    def client(self, session: ProxySession, on_server_request: ServerRequestHandler) -> OwnClient:
        return OwnClient(self, session, on_server_request)

    # -- its GET stream --------------------------------------------------------------------------------------

    def watch(self, session: ProxySession, headers: dict[str, str], ended: asyncio.Event) -> None:
        """Hold the own upstream session's GET stream for the v1 session's GET stream until `ended`
        (one held already is replaced: a resumed stream)."""
        old = self._streams.pop(session.id, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        if ended.is_set() or not self.carries():
            return
        stream = self._streams[session.id] = _Stream(ended, headers)
        stream.task = asyncio.ensure_future(self._hold(session, stream))

    async def ready(self, session: ProxySession) -> None:
        """Wait until the upstream GET stream being opened for the session is answered (at most
        `v1_lists.READY_WAIT_S` per stream; then it counts as ready, logged once)."""
        stream = self._streams.get(session.id)
        if stream is None or stream.ready.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stream.ready.wait(), v1_lists.READY_WAIT_S)
        if not stream.ready.is_set():
            stream.ready.set()
            log.warning("backend %s did not answer the GET stream of a v1 session's upstream session within %g s; requests of "
                        "the session no longer wait for it", self.backend.name, v1_lists.READY_WAIT_S)

    async def _hold(self, session: ProxySession, stream: _Stream) -> None:
        async def heard(message: dict[str, Any]) -> None:
            agreed = listen_filter_v1(self.declared(), session.state.get(SUBSCRIBED))
            out = own_stream_notification(message, agreed, session.state.get(LOG_LEVEL))
            if out is not None:
                await session.notify(out)

        async def attempt(backoff: Backoff) -> bool:
            def opened() -> None:
                stream.ready.set()
                backoff.reset()  # it was open: a break now is not a backend that keeps failing

            try:
                upstream = await self.own(session, stream.headers)
                await listen_upstream(upstream, refuse_server_request, heard, headers=stream.headers, on_open=opened)
                log.info("backend %s ended the GET stream of a v1 session's upstream session; opening it again", self.backend.name)
            except SessionLost:
                log.info("backend %s forgot a v1 session's upstream session; its GET stream goes on a new one", self.backend.name)
            except NoStandaloneStream:
                log.info("backend %s offers no GET stream for a v1 session's upstream session", self.backend.name)
                return False
            except McpError as exc:
                log.info("GET stream of a v1 session's upstream session on %s broke: %s", self.backend.name, exc.message)
            stream.ready.set()
            return True

        try:
            # Cancelling the attempt closes the upstream GET stream.
            await hold(stream.ended, attempt, what="holding the GET stream of a v1 session's upstream session", logger=log)
        finally:
            stream.ready.set()
            if self._streams.get(session.id) is stream:
                del self._streams[session.id]


class OwnClient:
    """The `ModernClient` interface of one v1 request over its session's own upstream session;
    `on_task(session)` is the same over the upstream session that holds a task (`tasks/*`: from its
    sealed id). `session_id`: the id of the own upstream session the last request went on (a
    created task is sealed with it)."""

    def __init__(self, sessions: OwnSessions, session: ProxySession, on_server_request: ServerRequestHandler):
        self.sessions = sessions
        self.session = session
        self.on_server_request = on_server_request
        self.session_id = ""
        self.task_session = ""

    def on_task(self, task_session: str) -> OwnClient:
        """This client, its requests sent on the upstream session `task_session` that holds a task."""
        view = copy.copy(self)
        view.task_session = task_session
        return view

    async def request(self, method: str, params: dict[str, Any], _meta: ModernMeta, *, headers: dict[str, str],
                      on_notification: NotificationHandler | None = None) -> dict[str, Any]:
        """Send one request and return its `result` (v2 shapes as the backend gives them). On the own
        session a request that met a forgotten session (404) is sent once more on a new one; on a
        task's session, a forgotten session means an unknown task (-32602)."""
        params = strip_envelope(params)
        task_session = self.task_session
        if task_session:
            try:
                return await self.sessions.backend.pool.by_id(task_session).request(
                    method, params, headers=headers, on_server_request=self.on_server_request, on_notification=on_notification)
            except SessionLost:
                raise unknown_task(FORGOTTEN) from None
        for last in (False, True):
            try:
                upstream = await self.sessions.own(self.session, headers)
                self.session_id = upstream.session_id or ""
                return await upstream.request(method, params, headers=headers, on_server_request=self.on_server_request,
                                              on_notification=on_notification)
            except SessionLost:
                if last:
                    raise McpError(INTERNAL_ERROR,
                                   f"Backend {self.sessions.backend.name} forgot the session again") from None
        raise AssertionError("unreachable")
