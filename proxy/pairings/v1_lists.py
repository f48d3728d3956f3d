"""List changes and resource updates on a v1 session's GET stream, from a 2026-07-28 backend (docs/behaviour.md §5.9).

A 2026-07-28 backend announces list changes and resource updates only on `subscriptions/listen`
streams. While a v1 session holds its GET stream open, the proxy holds one such listen upstream
for it, with the session's envelope and the GET request's headers, asking for each list the
backend declares `listChanged` for and the URIs the session `resources/subscribe`d
(`translators.subscriptions.listen_filter_v1`); each notification it hears goes to the session's
GET stream without the subscription id (`from_subscription`). The listen ends with the GET stream
(the `ended` event of `ProxySession.open_get_stream`); when the backend ends it first, or the
connection breaks, it is opened again after `stream_hold.RETRY_S` (doubling up to `MAX_RETRY_S`) while the
stream stays open. A backend that refuses the listen (a JSON-RPC error) is not asked again for
that stream. A request of the session that goes upstream while its listen is being opened waits
for the backend's acknowledgement (at most `READY_WAIT_S`), so a change that request causes is
heard; once a wait has run out (a gateway that holds the SSE answer back), no request waits for
that listen any more, nor for the ones that replace it while none has been acknowledged
(docs/decisions.md §65). Nothing runs for sessions without a GET stream, nor in front of backends that declare no list
changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from translators.envelope import ModernMeta
from translators.errors import McpError
from translators.subscriptions import acknowledged_filter, from_subscription, listen_filter_v1, listen_params, narrow_filter

from ..faces.session import ProxySession
from ..upstream.modern_wire import ModernClient
from .stream_hold import Backoff, hold

log = logging.getLogger(__name__)

SUBSCRIBED = "resourceSubscriptions"
"""The key of `ProxySession.state` under which a v1 session's `resources/subscribe`d URIs are kept (a list)."""
READY_WAIT_S = 5.0
"""Longest a request of the session waits for its listen being opened to be acknowledged (once per
listen: then the listen counts as ready)."""


class _Listen:
    """One session's listen: the GET stream's end, the headers it goes upstream with, whether
    requests need not wait for it (`ready`: the backend acknowledged it, the attempt is over, or a
    wait ran out), whether the backend acknowledged it, and the task holding it. `unheard`: a wait
    for its acknowledgement, or for that of a listen it replaced, ran out (requests do not wait)."""

    def __init__(self, ended: asyncio.Event, headers: dict[str, str], *, unheard: bool = False):
        self.ended = ended
        self.headers = headers
        self.ready = asyncio.Event()
        self.acknowledged = False
        self.unheard = unheard
        if unheard:
            self.ready.set()
        self.task: asyncio.Task[None] | None = None


class _Hearer:
    """What one listen attempt hears: the acknowledgement narrows the filter to what the backend
    agreed to (and makes the listen ready); each notification within it goes to the GET stream."""

    def __init__(self, session: ProxySession, listen: _Listen, wanted: dict[str, Any]):
        self.session = session
        self.listen = listen
        self.wanted = wanted
        self.agreed = dict(wanted)
        self.acknowledged = False

    async def __call__(self, message: dict[str, Any]) -> None:
        agreed = acknowledged_filter(message)
        if agreed is not None:
            self.agreed, self.acknowledged = narrow_filter(agreed, self.wanted), True
            self.listen.acknowledged = True
            self.listen.ready.set()
            return
        out = from_subscription(message, self.agreed)
        if out is not None:
            await self.session.notify(out)


class ListPush:
    """The upstream listens of one `V1OverV2`'s sessions, at most one per session. `backend` is the
    member's `Backend`; `meta_of(session)` the modern envelope of the session's requests."""

    def __init__(self, backend: Any, modern: ModernClient, meta_of: Callable[[ProxySession], ModernMeta]):
        self.backend = backend
        self.modern = modern
        self.meta_of = meta_of
        self._listens: dict[str, _Listen] = {}

    def __len__(self) -> int:
        return len(self._listens)

    def watch(self, session: ProxySession, headers: dict[str, str], ended: asyncio.Event) -> None:
        """Hold a listen for the session's GET stream until `ended` is set; one the session holds
        already is replaced (a resumed stream, changed subscriptions: when the one replaced was
        never acknowledged though a request waited its fill, requests do not wait for the new one)."""
        old = self._listens.pop(session.id, None)
        if old is not None and old.task is not None:
            old.task.cancel()
        if ended.is_set() or not self.offered():
            return
        listen = _Listen(ended, headers, unheard=old is not None and old.unheard and not old.acknowledged)
        self._listens[session.id] = listen
        listen.task = asyncio.ensure_future(self._hold(session, listen))

    def offered(self, *, resources: bool = False) -> bool:
        """Whether the backend, as last probed, is a 2026-07-28 one declaring list changes or resource
        subscriptions (`resources`: resource subscriptions)."""
        profile = self.backend.profile
        if profile is None or profile.dialect != "v2-modern":
            return False
        wanted = listen_filter_v1(profile.capabilities, [""])
        return "resourceSubscriptions" in wanted if resources else bool(wanted)

    def renew(self, session: ProxySession) -> None:
        """The session's subscriptions changed: a listen it holds is opened again with them."""
        listen = self._listens.get(session.id)
        if listen is not None:
            self.watch(session, listen.headers, listen.ended)

    async def ready(self, session: ProxySession) -> None:
        """Wait until a listen being opened for the session is acknowledged: at most `READY_WAIT_S`
        for each listen, counted from the first request that waits; when that runs out the listen
        counts as ready (logged once) and later requests go on at once."""
        listen = self._listens.get(session.id)
        if listen is None or listen.ready.is_set():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(listen.ready.wait(), READY_WAIT_S)
        if not listen.ready.is_set():
            listen.unheard = True
            listen.ready.set()
            log.warning("backend %s did not acknowledge subscriptions/listen for a v1 session within %g s (a gateway holding "
                        "the stream back?); requests of the session no longer wait for it", self.backend.name, READY_WAIT_S)

    async def _hold(self, session: ProxySession, listen: _Listen) -> None:
        async def attempt(backoff: Backoff) -> bool:
            profile = await self.backend.current()
            wanted = listen_filter_v1(profile.capabilities, session.state.get(SUBSCRIBED)) if profile.dialect == "v2-modern" else {}
            if not wanted:  # only resource subscriptions are offered, and there are none yet (`renew`)
                listen.ready.set()
                await listen.ended.wait()
                return False
            heard = _Hearer(session, listen, wanted)
            try:
                await self.modern.request("subscriptions/listen", listen_params(wanted), self.meta_of(session),
                                          headers=listen.headers, on_notification=heard)
                log.info("backend %s ended the listen of a v1 session; listening again", self.backend.name)
            except McpError as exc:
                if exc.http_status != 502:
                    log.info("backend %s refused subscriptions/listen for a v1 session: %d %s", self.backend.name, exc.code,
                             exc.message)
                    return False
                log.info("listen of a v1 session on backend %s broke: %s", self.backend.name, exc.message)
            finally:
                listen.ready.set()
                if heard.acknowledged:
                    backoff.reset()  # it was listening: a break now is not a backend that keeps failing
            return True

        try:
            # Cancelling the attempt closes the upstream stream; the backend ends the subscription.
            await hold(listen.ended, attempt, what="listening upstream for a v1 session's GET stream", logger=log)
        finally:
            listen.ready.set()
            if self._listens.get(session.id) is listen:
                del self._listens[session.id]
