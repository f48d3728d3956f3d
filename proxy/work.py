"""What is still bound to one backend, so that a draining backend can say when it is drained
(docs/decisions.md §84; docs/operations.md "Reload and drain").

Counted per fleet member: requests in flight that are bound to it (a task's `tasks/*`, an MRTR
retry, a relayed session's POST and GET stream, a modern client's long wait), the relayed
sessions opened on it (from the `initialize` the proxy relayed until their DELETE, or until they
have been idle for `session_idle_ms`) and its v1 tasks the proxy follows for modern clients
(created through it, until it sees them end or their ttl passes); the proxy's own sessions on it
are counted by the session face (`SessionStore.count_for`). A task relayed to a v2-modern backend
that nobody asks about between two polls is not visible here: its client's next `tasks/*` request
is bound work again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

REMOVED_MARK = "mcp-tasks-proxy: backend removed: "
"""The cancel message `abandon` gives a handler, followed by the backend's name (`removed_backend`)."""


def removed_backend(cancelled: BaseException) -> str | None:
    """The backend whose removal cancelled a handler (`BoundWork.abandon`), else None."""
    message = cancelled.args[0] if cancelled.args else None
    return message[len(REMOVED_MARK):] if isinstance(message, str) and message.startswith(REMOVED_MARK) else None


def _current_task() -> asyncio.Task[object] | None:
    """The task running now; None outside an event loop (a count kept by hand)."""
    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class BoundWork:
    """One backend's bound work: `in_flight` requests, and relayed sessions by the id their
    client was given (last seen, monotonic seconds), forgotten after `idle_s` without a request."""

    def __init__(self, idle_s: float, clock: Callable[[], float] = time.monotonic):
        self.idle_s = idle_s
        self._clock = clock
        self.in_flight = 0
        self._sessions: dict[str, float] = {}
        self._busy: dict[str, int] = {}
        """Relayed session id → its requests and GET streams running now (`session_began`)."""
        self._handlers: set[asyncio.Task[object]] = set()
        """The request handlers doing bound work now (`abandon`)."""

    def begin(self) -> None:
        """A bound request started, in the request handler's task (pair with `end`)."""
        self.in_flight += 1
        task = _current_task()
        if task is not None:
            self._handlers.add(task)

    def end(self) -> None:
        self.in_flight -= 1
        task = _current_task()
        if task is not None:
            self._handlers.discard(task)

    def abandon(self, backend: str) -> int:
        """`backend` is gone (removed with its work): each handler doing bound work is cancelled,
        naming it (`REMOVED_MARK`), for the entry to answer its client at once (decision 165).
        Returns how many."""
        handlers, self._handlers = self._handlers, set()
        for task in handlers:
            task.cancel(REMOVED_MARK + backend)
        return len(handlers)

    def session_seen(self, session_id: str) -> None:
        """A relayed session was opened (its `initialize`)."""
        self._sessions[session_id] = self._clock()

    def session_used(self, session_id: str) -> bool:
        """A relayed session was used without a request of its own reaching the backend (a held
        task's, answered by the proxy): refreshes it if it is counted (one opened elsewhere is
        not); returns whether it is."""
        if session_id in self._sessions:
            self._sessions[session_id] = self._clock()
            return True
        return False

    def session_began(self, session_id: str) -> bool:
        """A relayed session's request or GET stream began: as `session_used`, and while it runs
        the session is not idle; returns whether it is counted (then pair with `session_done`)."""
        if session_id in self._sessions:
            self._sessions[session_id] = self._clock()
            self._busy[session_id] = self._busy.get(session_id, 0) + 1
            return True
        return False

    def session_done(self, session_id: str) -> None:
        """A request or stream `session_began` counted ended: the session is idle from now, as the
        stdio pool counts it (decision 140), unless it was ended meanwhile (a DELETE before a GET
        stream's end must not bring it back: decision 146)."""
        busy = self._busy.pop(session_id, 1) - 1
        if busy:
            self._busy[session_id] = busy
        if session_id in self._sessions:
            self._sessions[session_id] = self._clock()

    def session_ended(self, session_id: str) -> None:
        """A relayed session's DELETE was answered, or the backend no longer knows it (404)."""
        self._sessions.pop(session_id, None)

    def relayed_sessions(self) -> int:
        """Relayed sessions opened here and used within `idle_s`."""
        cutoff = self._clock() - self.idle_s
        busy = self._busy
        for session_id in [sid for sid, seen in self._sessions.items() if seen < cutoff and sid not in busy]:
            del self._sessions[session_id]
        return len(self._sessions)
