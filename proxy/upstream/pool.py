"""Upstream session pools (docs/behaviour.md §4.1).

v1 servers bind tasks to the session that created them, so the proxy keeps one upstream session
per (backend, principal, client capabilities that matter upstream), re-creates it when the
backend forgets it, and can adopt a session named inside a sealed task id after a restart
(a v1 session outlives the proxy). With `v1_session_scope = "task"` each task gets a session
of its own, so a fault that ends a session costs one task.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from cachetools import LRUCache

from .endpoint import Endpoint
from .session_wire import UpstreamSession

Starting = Callable[[UpstreamSession], Awaitable[None]]
"""Run on a new session between `initialize` and `notifications/initialized`."""


def _capability_key(capabilities: Mapping[str, Any]) -> str:
    if not capabilities:
        return "{}"  # a client that declares no input capability: most calls
    return json.dumps(capabilities, sort_keys=True, separators=(",", ":"))


class SessionPool:
    """Sessions of one session-wire backend.

    `max_sessions` bounds the sessions remembered by id (least recently used forgotten first; a
    forgotten session is adopted again by id when a sealed task id names it).
    """

    def __init__(self, backend: Endpoint, *, max_sessions: int = 10_000):
        self.backend = backend
        self._shared: LRUCache[tuple[str, str], UpstreamSession] = LRUCache(maxsize=max_sessions)
        self._by_id: LRUCache[str, UpstreamSession] = LRUCache(maxsize=max_sessions)
        self._locks: LRUCache[tuple[str, str], asyncio.Lock] = LRUCache(maxsize=max_sessions)

    async def shared(self, principal: str, capabilities: Mapping[str, Any], headers: Mapping[str, str], *,
                     before_initialized: Starting | None = None, caller: str | None = None) -> UpstreamSession:
        """The principal's pooled session for these capabilities, initialised on first use and
        re-initialised when the backend lost it; `before_initialized` runs when this call opens
        the session (`UpstreamSession.initialize`). `principal` keys the pool; `caller`, the
        proxy's principal of the caller the session serves, when it is not `principal` itself
        (a v1 session's own upstream session is keyed by that session). Raises `McpError` when
        `initialize` fails."""
        key = (principal, _capability_key(capabilities))
        session = self._shared.get(key)
        if session is not None and not session.lost and session.session_id:
            return session  # the common case: no lock to take (the lock only orders openings)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            session = self._shared.get(key)
            if session is None or session.lost or not session.session_id:
                session = await self.fresh(capabilities, headers, caller or principal, before_initialized=before_initialized)
                self._shared[key] = session
            return session

    async def fresh(self, capabilities: Mapping[str, Any], headers: Mapping[str, str], caller: str, *,
                    before_initialized: Starting | None = None) -> UpstreamSession:
        """A new initialised session, not shared (v1_session_scope = "task"), for the proxy's
        principal `caller` (`Endpoint.caller_headers`)."""
        session = UpstreamSession(self.backend, capabilities)
        backend = self.backend  # a stdio connector marks its own sessions and names their caller (§140, §144)
        headers = {**headers, **backend.own_session_headers, **backend.caller_headers(caller)}
        await session.initialize(headers, before_initialized=before_initialized)
        if session.session_id:
            self._by_id[session.session_id] = session
        return session

    def by_id(self, session_id: str) -> UpstreamSession:
        """The session with this id; adopted without `initialize` when the pool does not hold it
        (after a proxy restart or eviction). An empty id means a backend without session ids."""
        session = self._by_id.get(session_id) if session_id else None
        if session is None:
            session = UpstreamSession(self.backend, {}, session_id=session_id or None)
            if session_id:
                self._by_id[session_id] = session
        return session

    def forget_all(self) -> None:
        """Forget every session without ending it upstream: tasks live in those sessions and their
        sealed ids must keep working after a restart (docs/behaviour.md §6 "Nothing lost")."""
        self._shared.clear()
        self._by_id.clear()
