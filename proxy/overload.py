"""Admission control (docs/decisions.md §177): a process with more work than CPU refuses new work at
once with HTTP 503 and `Retry-After`, instead of taking it on and answering it seconds later.

One asyncio process saturates on CPU, and what a saturated loop makes every request wait for is
its turn: a request read from its socket runs only once the loop has run every callback ready
before it. That wait is the process's queue. `LoopLag` measures it the way a request meets it: a
watcher that asks to run every `SAMPLE_S` and notes how late it ran, and how much of that time the
loop's thread spent on the CPU. A sample counts as overloaded when it ran later than
`overload_lag_ms` while the thread was busy at least `BUSY` of the time: a loop that is late
because it computes, not because it was stopped (SIGSTOP), blocked in a call, or waiting for a CPU
other processes hold. Once `RUN` samples in a row are overloaded, the process sheds the requests
that would start work (`starts_work`); the first sample that is not ends it. A single late sample
(a garbage collection) is not overload.

Requests that continue work already admitted (`tasks/*`, answers to the server's requests,
notifications, `ping`; GET streams and DELETEs, which do not come through here) are still served:
finishing admitted work is what empties the queue, and a client whose task was taken must be able
to read its result.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from translators.errors import INTERNAL_ERROR, McpError

SAMPLE_S: Final = 0.1
"""How often the watcher asks to run."""
RUN: Final = 3
"""Samples in a row over the bound that make the process overloaded."""
BUSY: Final = 0.25
"""The least share of a sample's time the loop's thread spent on the CPU for the sample to count."""
RETRY_AFTER_S: Final = 1
"""`Retry-After` of an overloaded process's 503."""
CONTINUING: Final = frozenset({"ping"})
"""Requests outside `tasks/*` that never start work."""


class LoopLag:
    """The event loop's lag, sampled (`watch`), and whether it makes the process shed new work."""

    __slots__ = ("bound_s", "lag_s", "shedding", "_over", "_timer")

    def __init__(self, bound_ms: int):
        self.bound_s = bound_ms / 1000
        """0: never shed."""
        self.lag_s = 0.0
        """The last sample: how late the watcher ran."""
        self.shedding = False
        self._over = 0

    def sample(self, late_s: float, busy: float) -> None:
        """Note one sample: the watcher ran `late_s` seconds after it asked to, and the loop's
        thread was on the CPU for the share `busy` of the time since the last sample."""
        self.lag_s = late_s
        self._over = self._over + 1 if self.bound_s and late_s > self.bound_s and busy >= BUSY else 0
        self.shedding = self._over >= RUN

    async def watch(self) -> None:
        """Sample the loop's lag until cancelled (the application's lifetime). Each sample is a
        plain timer callback (`_tick`) that reads the clock one turn of the ready queue later
        (`_late`), where a task woken by the same timer would have run, and sets the next timer: no
        task wakes and no coroutine or future is made (docs/decisions.md §189)."""
        loop = asyncio.get_running_loop()
        self._arm(loop, loop.time(), time.thread_time())
        try:
            await loop.create_future()  # never set: cancelled with the application
        finally:
            self._timer.cancel()

    def _arm(self, loop: asyncio.AbstractEventLoop, started: float, cpu: float) -> None:
        """Ask to run `SAMPLE_S` after `started` (loop time; `cpu`: the thread's CPU time then)."""
        self._timer = loop.call_at(started + SAMPLE_S, self._tick, loop, started, cpu)

    def _tick(self, loop: asyncio.AbstractEventLoop, started: float, cpu: float) -> None:
        # A sleeping task is woken through its future: its step is queued behind every callback
        # already ready. That wait is part of the lag a request meets, so the sample waits for it too.
        self._timer = loop.call_soon(self._late, loop, started, cpu)

    def _late(self, loop: asyncio.AbstractEventLoop, started: float, cpu: float) -> None:
        now, cpu_now = loop.time(), time.thread_time()
        self.sample(max(0.0, now - (started + SAMPLE_S)), (cpu_now - cpu) / max(now - started, 1e-9))
        self._arm(loop, now, cpu_now)

    def refusal(self) -> McpError:
        """The error a shed request is answered with (HTTP 503; the entry adds `Retry-After`)."""
        return McpError(INTERNAL_ERROR, f"Service Unavailable: mcp-tasks-proxy is overloaded (its event loop runs more than "
                                        f"{self.bound_s * 1000:g} ms late); retry after {RETRY_AFTER_S} s", http_status=503)


def starts_work(method: str, kind: str) -> bool:
    """Whether a message would start work an overloaded process sheds: a request other than
    `tasks/*` and `ping` (an `initialize`, a `tools/call`, a listing, ...)."""
    return kind == "request" and not method.startswith("tasks/") and method not in CONTINUING
