"""A queue with one reader at a time, for the messages a stdio backend's process sends toward one
request (`stdio_session.Pending`): what `asyncio.Queue` offers the bridge (`put_nowait`, `get`,
`get_nowait`, `empty`) without its unbounded-size bookkeeping, its `Event` and its loop checks,
which cost more than the rest of a relayed call's routing (docs/performance.md "Relay")."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

_T = TypeVar("_T")


class Inbox(Generic[_T]):
    """Items in the order put; `get` waits for one. One reader at a time (the POST carrying the
    request, or the start's `initialize`): a second concurrent `get` raises `RuntimeError`."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[_T] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: _T) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def get(self, timeout_s: float | None = None, deadlines: Deadlines | None = None) -> _T:
        """The first item, waited for at most `timeout_s` seconds (None: for ever), timed by
        `deadlines` when given (one timer for many inboxes; raises its error), else by a timer of
        its own (raises `TimeoutError`)."""
        while not self._items:
            if self._waiter is not None and not self._waiter.done():
                raise RuntimeError("an Inbox has one reader at a time")
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = None
            if timeout_s is not None:
                if deadlines is not None:
                    deadlines.watch(waiter, loop, timeout_s)
                else:
                    timer = loop.call_at(loop.time() + timeout_s, _expire, waiter)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
                elif deadlines is not None:
                    deadlines.unwatch(waiter)
                if self._waiter is waiter:
                    self._waiter = None
        return self._items.popleft()

    def get_nowait(self) -> _T:
        """The first item. Raises `asyncio.QueueEmpty` when there is none."""
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class Deadlines:
    """The time limits of many waits, kept by one timer of the event loop (set for the earliest,
    set again when it has passed) rather than by a timer set and cancelled for each wait: a wait
    that ends in time costs a dict entry. A wait not ended by its limit fails with `error()`
    (default `TimeoutError`)."""

    __slots__ = ("_due", "_timer", "_timer_due", "_loop", "_error")

    def __init__(self, error: Callable[[], BaseException] = TimeoutError) -> None:
        self._due: dict[asyncio.Future[None], float] = {}
        """Each wait's limit, in the loop's clock (seconds)."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop the timer is set on: waits on another loop (a test's next) start over."""
        self._error = error

    def watch(self, waiter: asyncio.Future[None], loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        if loop is not self._loop:  # the loop the timer was set on is gone: its waits with it
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._loop = None, loop
            self._due = {w: d for w, d in self._due.items() if w.get_loop() is loop}
        due = loop.time() + timeout_s
        self._due[waiter] = due
        timer = self._timer
        if timer is None or due < self._timer_due:
            if timer is not None:
                timer.cancel()
            self._timer, self._timer_due = loop.call_at(due, self._expire_due, loop), due

    def unwatch(self, waiter: asyncio.Future[None]) -> None:
        self._due.pop(waiter, None)

    def __len__(self) -> int:
        return len(self._due)

    def _expire_due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        for waiter, due in list(self._due.items()):
            if due <= now:
                del self._due[waiter]
                if not waiter.done():
                    waiter.set_exception(self._error())
        if self._due:
            self._timer_due = min(self._due.values())
            self._timer = loop.call_at(self._timer_due, self._expire_due, loop)
