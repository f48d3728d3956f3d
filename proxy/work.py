"""What is still bound to one backend, so that a draining backend can say when it is drained
(docs/decisions.md §84; docs/configuration.md "Reload and drain").

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

import time
from collections.abc import Callable


class BoundWork:
    """One backend's bound work: `in_flight` requests, and relayed sessions by the id their
    client was given (last seen, monotonic seconds), forgotten after `idle_s` without a request."""

    def __init__(self, idle_s: float, clock: Callable[[], float] = time.monotonic):
        self.idle_s = idle_s
        self._clock = clock
        self.in_flight = 0
        self._sessions: dict[str, float] = {}

    def begin(self) -> None:
        """A bound request started (pair with `end`)."""
        self.in_flight += 1

    def end(self) -> None:
        self.in_flight -= 1

    def session_seen(self, session_id: str) -> None:
        """A relayed session was opened (its `initialize`) or used."""
        self._sessions[session_id] = self._clock()

    def session_used(self, session_id: str) -> bool:
        """A relayed session's request began: refreshes it if it is counted (one opened elsewhere
        is not); returns whether it is. A request that began counted renews it at its end with
        `session_seen` (while it ran, `relayed_sessions` may have let it go: decision 140)."""
        if session_id in self._sessions:
            self._sessions[session_id] = self._clock()
            return True
        return False

    def session_ended(self, session_id: str) -> None:
        """A relayed session's DELETE was answered, or the backend no longer knows it (404)."""
        self._sessions.pop(session_id, None)

    def relayed_sessions(self) -> int:
        """Relayed sessions opened here and used within `idle_s`."""
        cutoff = self._clock() - self.idle_s
        for session_id in [sid for sid, seen in self._sessions.items() if seen < cutoff]:
            del self._sessions[session_id]
        return len(self._sessions)
