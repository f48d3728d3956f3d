"""List changes and resource updates on a v2-session client's GET stream (docs/behaviour.md §3
"v2-session client", §5.9), in front of a v2-modern or a v1 backend.

While a v2-session session holds its GET stream open:

* in front of a **v2-modern** backend, the proxy holds one `subscriptions/listen` upstream for
  it: exactly what a v1 session gets (`proxy.pairings.v1_lists.ListPush`, reused unchanged: it
  reads the session's URIs from `ProxySession.state[SUBSCRIBED]` and its envelope from `meta_of`);
* in front of a **v1** backend, it subscribes to the GET stream of the session's pooled upstream
  session (`proxy.state.capture.SessionListener.subscribers`, held once per upstream session, as
  for `subscriptions/listen`, §4.9): each list change the backend declares `listChanged` for, and
  each `notifications/resources/updated` for a URI this session subscribed to, goes to the
  session's GET stream (`translators.subscriptions.from_subscription` with the session's filter
  `listen_filter_v1`, read again for every message). A request of the session waits, at most
  `READY_WAIT_S`, until that upstream GET stream is open, so a change it causes is heard. When the
  upstream stream ends while the client's stays open, it is listened to again after `stream_hold.RETRY_S`
  (doubling up to `MAX_RETRY_S`).

"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from translators.envelope import ModernMeta
from translators.errors import McpError
from translators.subscriptions import from_subscription, listen_filter_v1

from ..faces.session import ProxySession
from ..state.capture import InputBook
from ..upstream.modern_wire import ModernClient
from ..upstream.session_wire import UpstreamSession
from .stream_hold import Backoff, hold
from .v1_lists import READY_WAIT_S, SUBSCRIBED, ListPush

log = logging.getLogger(__name__)

QUEUE_LIMIT = 1000
"""Notifications waiting for one slow GET stream; beyond it the oldest are dropped (level triggers)."""

UpstreamOf = Callable[[ProxySession, dict[str, str]], Awaitable[UpstreamSession]]
"""The pooled upstream session a session's requests go on (v1 backends)."""


class _Heard:
    """One session's hold on its pooled upstream session's GET stream: the client's stream's end,
    whether requests need not wait (`ready`), and the task holding it."""

    def __init__(self, ended: asyncio.Event):
        self.ended = ended
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class SessionPush:
    """What the GET streams of one `V2SessionCarriage`'s sessions get. `backend` is the member's
    `Backend`, `inputs` its `InputBook` (v1 backends), `meta_of(session)` the modern envelope of
    the session's requests, `upstream_of` its pooled upstream session."""

    def __init__(self, backend: Any, modern: ModernClient, meta_of: Callable[[ProxySession], ModernMeta], inputs: InputBook,
                 upstream_of: UpstreamOf):
        self.backend = backend
        self.lists = ListPush(backend, modern, meta_of)
        """The sessions' upstream listens in front of a v2-modern backend."""
        self.inputs = inputs
        self.upstream_of = upstream_of
        self._heard: dict[str, _Heard] = {}

    def __len__(self) -> int:
        """Sessions whose GET stream is fed (an upstream listen, or an upstream GET stream heard)."""
        return len(self.lists) + len(self._heard)

    def watch(self, session: ProxySession, headers: dict[str, str], ended: asyncio.Event) -> None:
        """The session opened its GET stream, which lasts until `ended`: feed it from the backend."""
        profile = self.backend.profile
        dialect = profile.dialect if profile is not None else None
        if dialect == "v2-modern":
            self.lists.watch(session, headers, ended)
            return
        old = self._heard.pop(session.id, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        if dialect != "v1" or ended.is_set() or not listen_filter_v1(profile.capabilities, [""]):
            return
        heard = _Heard(ended)
        self._heard[session.id] = heard
        heard.task = asyncio.ensure_future(self._hear(session, headers, heard))

    def offers_subscriptions(self) -> bool:
        """Whether the backend, as last probed, declares `resources.subscribe` (v1 or v2-modern)."""
        profile = self.backend.profile
        if profile is None or profile.dialect not in ("v1", "v2-modern"):
            return False
        return "resourceSubscriptions" in listen_filter_v1(profile.capabilities, [""])

    async def changed(self, session: ProxySession) -> None:
        """The session's URIs changed: a listen it holds upstream is opened again with them (a v1
        backend's GET stream is filtered with them from the next message on)."""
        self.lists.renew(session)
        await self.lists.ready(session)

    async def ready(self, session: ProxySession) -> None:
        """Wait until what feeds the session's GET stream can hear a change its next request causes
        (at most `READY_WAIT_S`)."""
        await self.lists.ready(session)
        heard = self._heard.get(session.id)
        if heard is not None and not heard.ready.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(heard.ready.wait(), READY_WAIT_S)
            heard.ready.set()

    async def _hear(self, session: ProxySession, headers: dict[str, str], heard: _Heard) -> None:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def hear(message: dict[str, Any]) -> None:
            if queue.qsize() >= QUEUE_LIMIT:
                queue.get_nowait()
            queue.put_nowait(message)

        async def attempt(backoff: Backoff) -> bool:
            try:
                upstream = await self.upstream_of(session, headers)
            except McpError as exc:  # the backend is unreachable, or refused `initialize`
                heard.ready.set()
                log.info("no upstream session for a v2-session client's GET stream on %s: %s", self.backend.name, exc.message)
                return True
            await self.inputs.listening(upstream, headers, timeout_s=READY_WAIT_S)
            listener = self.inputs.listener(upstream, headers)
            heard.ready.set()
            if listener is None:  # a backend without session ids: no GET stream to hear
                await heard.ended.wait()
                return False
            listener.subscribers.add(hear)
            try:
                while True:
                    getter = asyncio.ensure_future(queue.get())
                    try:
                        await asyncio.wait([getter, listener.task], return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        if not getter.done():
                            getter.cancel()
                    if getter.cancelled():
                        break
                    await self._deliver(session, getter.result())
            finally:
                self.inputs.unsubscribe(listener, hear)
            log.info("GET stream of the upstream session of a v2-session client on %s ended; listening again", self.backend.name)
            return True

        try:
            await hold(heard.ended, attempt, what="hearing the upstream GET stream for a v2-session client's GET stream", logger=log)
        finally:
            heard.ready.set()
            if self._heard.get(session.id) is heard:
                del self._heard[session.id]

    async def _deliver(self, session: ProxySession, message: dict[str, Any]) -> None:
        profile = self.backend.profile
        wanted = listen_filter_v1(profile.capabilities, session.state.get(SUBSCRIBED)) if profile is not None else {}
        out = from_subscription(message, wanted)
        if out is not None:
            await session.notify(out)
