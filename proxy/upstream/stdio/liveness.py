"""Whether a stdio server process still answers while requests wait on it (docs/decisions.md §72).

A process that is stopped (SIGSTOP), deadlocked or stuck writes nothing, and every request on it
would wait for its client's timeout. While at least one request waits in the process, silence on
its stdout is measured: after half of `timeout_s` without a message the process is sent a `ping`
(MCP core 2025-11-25 "Ping": the receiver must answer promptly), and after the whole of
`timeout_s` without one (the ping unanswered, nothing else written) it is taken as hung; its
`ProcessSlot` then fails its requests, kills it and starts it again. A process with no request
waiting is never pinged (nothing waits on it; the next request starts the measure).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterator


class Liveness:
    """The liveness watch of one process. `send_ping(id)` writes a `ping` with that id to it;
    `waiting()` says whether a request waits on it; `ids` gives ids unique in the process."""

    def __init__(self, timeout_s: float, *, send_ping: Callable[[int], bool], waiting: Callable[[], bool], ids: Iterator[int]):
        self.timeout_s = timeout_s
        self._send_ping = send_ping
        self._waiting = waiting
        self._ids = ids
        self._pings: deque[int] = deque(maxlen=16)
        """The ids of the last pings sent (a process that ignores pings leaves them unanswered)."""
        self._last_heard = time.monotonic()
        self._busy = asyncio.Event()

    def heard(self) -> None:
        """The process wrote a message (any stdout line counts as a sign of life)."""
        self._last_heard = time.monotonic()

    def sent(self) -> None:
        """A request was sent to the process: silence is measured from now if nothing waited before."""
        if not self._busy.is_set():
            self._last_heard = time.monotonic()
            self._busy.set()

    def answered(self, request_id: object) -> bool:
        """Whether a response with this id answers one of the watch's pings (then it is taken here)."""
        if self._pings and isinstance(request_id, int) and request_id in self._pings:
            self._pings.remove(request_id)
            return True
        return False

    async def hung(self) -> str:
        """Return (why, for log lines and errors) once the process has been silent for
        `timeout_s` while a request waited on it; runs until then (cancel it to stop watching)."""
        half = self.timeout_s / 2
        while True:
            await self._busy.wait()
            if not self._waiting():
                self._busy.clear()
                continue
            quiet = time.monotonic() - self._last_heard
            if quiet < half:
                await asyncio.sleep(half - quiet)
                continue
            pinged_at = time.monotonic()
            ping_id = next(self._ids)
            self._pings.append(ping_id)
            self._send_ping(ping_id)
            await asyncio.sleep(half)
            if self._last_heard < pinged_at and self._waiting():
                return (f"the process stopped answering (no message on its stdout, not even to a ping, for "
                        f"{round(self.timeout_s * 1000)} ms while a request waited)")
