"""`proxy.upstream.inbox.Inbox`, the queue a stdio request's messages arrive on: order, waiting,
the read bound, and one reader at a time."""

from __future__ import annotations

import asyncio
import time

import pytest

from proxy.upstream.inbox import Deadlines, Inbox


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


async def test_deadlines_time_many_waits_with_one_timer_and_each_fails_at_its_own_limit() -> None:
    deadlines = Deadlines()
    loop = asyncio.get_running_loop()
    late, soon, answered = Inbox[str](), Inbox[str](), Inbox[str]()
    started = loop.time()
    waits = [asyncio.ensure_future(inbox.get(limit, deadlines)) for inbox, limit in ((late, 1.0), (soon, 0.1), (answered, 0.1))]
    await asyncio.sleep(0)
    assert len(deadlines) == 3
    answered.put_nowait("in time")
    assert await waits[2] == "in time"
    assert len(deadlines) == 2  # an answered wait leaves nothing behind
    with pytest.raises(TimeoutError):
        await waits[1]
    soon_failed = loop.time() - started
    assert not waits[0].done()  # the earlier limit passing does not end the later wait
    with pytest.raises(TimeoutError):
        await waits[0]
    late_failed = loop.time() - started
    assert (soon_failed >= 0.1, late_failed >= 1.0, len(deadlines)) == (True, True, 0)  # never before its limit


async def test_a_cancelled_wait_is_forgotten_by_its_deadlines_and_the_inbox_keeps_its_item() -> None:
    deadlines = Deadlines()
    inbox: Inbox[str] = Inbox()
    waiting = asyncio.ensure_future(inbox.get(30.0, deadlines))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert len(deadlines) == 0
    inbox.put_nowait("kept")
    assert await inbox.get(30.0, deadlines) == "kept"


async def test_deadlines_fail_a_late_wait_with_their_own_error() -> None:
    class ReadTimeout(TimeoutError):
        pass

    deadlines = Deadlines(lambda: ReadTimeout("nothing in time"))
    with pytest.raises(ReadTimeout, match="nothing in time"):
        await Inbox[str]().get(0.01, deadlines)
    assert len(deadlines) == 0


def test_deadlines_kept_over_a_loop_that_ended_time_the_next_loops_waits() -> None:
    """A timer set on a loop that ended never fires: a wait on the next loop whose limit is later
    than that timer's is timed anew (it used to wait for ever)."""
    deadlines = Deadlines()

    async def first() -> None:
        left = asyncio.ensure_future(Inbox[str]().get(0.5, deadlines))  # the timer for 0.5 s; the loop ends first
        await asyncio.sleep(0)
        assert not left.done()

    async def second() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(Inbox[str]().get(1.0, deadlines), 10.0)
        assert len(deadlines) == 0

    asyncio.run(first())
    started = time.monotonic()
    asyncio.run(second())
    assert time.monotonic() - started < 10.0  # failed at its own limit, not at wait_for's
