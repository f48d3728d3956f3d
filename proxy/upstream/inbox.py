"""A queue with one reader at a time, for the messages a stdio backend's process sends toward one
request (`stdio_mux.Pending`): what `asyncio.Queue` offers the bridge (`put_nowait`, `get`,
`get_nowait`, `empty`) without its unbounded-size bookkeeping, its `Event` and its loop checks,
which cost more than the rest of a relayed call's routing (docs/performance.md "Relay")."""

from __future__ import annotations

import asyncio
from collections import deque
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

    async def get(self, timeout_s: float | None = None) -> _T:
        """The first item, waited for at most `timeout_s` seconds (None: for ever). Raises
        `TimeoutError`."""
        while not self._items:
            if self._waiter is not None and not self._waiter.done():
                raise RuntimeError("an Inbox has one reader at a time")
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = None if timeout_s is None else loop.call_at(loop.time() + timeout_s, _expire, waiter)
            try:
                await waiter
            finally:
                if timer is not None:
                    timer.cancel()
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
