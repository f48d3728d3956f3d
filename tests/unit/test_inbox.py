"""`proxy.upstream.inbox.Inbox`, the queue a stdio request's messages arrive on: order, waiting,
the read bound, and one reader at a time."""

from __future__ import annotations

import asyncio

import pytest

from proxy.upstream.inbox import Inbox


async def test_items_come_in_the_order_put_and_a_reader_waits_for_the_next() -> None:
    inbox: Inbox[int] = Inbox()
    inbox.put_nowait(1)
    assert await inbox.get() == 1
    reading = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    assert not reading.done()
    inbox.put_nowait(2)
    inbox.put_nowait(3)
    assert await reading == 2
    assert (inbox.qsize(), inbox.get_nowait(), inbox.empty()) == (1, 3, True)
    with pytest.raises(asyncio.QueueEmpty):
        inbox.get_nowait()


async def test_a_read_bound_raises_timeout_and_a_later_item_is_kept() -> None:
    inbox: Inbox[str] = Inbox()
    with pytest.raises(TimeoutError):
        await inbox.get(0.05)
    inbox.put_nowait("late")
    assert await inbox.get(0.05) == "late"


async def test_a_cancelled_reader_leaves_the_item_for_the_next_and_a_second_reader_is_refused() -> None:
    inbox: Inbox[str] = Inbox()
    first = asyncio.ensure_future(inbox.get())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="one reader at a time"):
        await inbox.get()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    inbox.put_nowait("kept")
    assert await inbox.get() == "kept"
