"""`proxy.eventloop.cancel_and_wait`: a task that lost its cancellation is cancelled again until it
ends (docs/decisions.md §186)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from proxy.eventloop import cancel_and_wait


def _task_looping_on_wait_for() -> tuple[asyncio.Task[None], list[asyncio.Future[None]]]:
    """A loop task awaiting `asyncio.wait_for` on a future of its own each round (redis-py's sends)."""
    loop = asyncio.get_running_loop()
    inners: list[asyncio.Future[None]] = []

    async def looping() -> None:
        while True:
            inner = loop.create_future()
            inners.append(inner)
            await asyncio.wait_for(inner, 10)

    return asyncio.ensure_future(looping()), inners


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12's wait_for no longer loses a cancellation")
async def test_one_cancellation_landing_as_wait_for_ends_is_lost_on_python_3_11():
    task, inners = _task_looping_on_wait_for()
    await asyncio.sleep(0)  # the task waits on its first future
    inners[-1].set_result(None)  # that future ends: the task's wake-up is queued...
    task.cancel()  # ...and the cancellation lands before it runs
    for _ in range(3):
        await asyncio.sleep(0)
    assert (task.done(), len(inners)) == (False, 2)  # the cancellation is gone: the task is on its next round
    await cancel_and_wait(task)


async def test_cancel_and_wait_ends_a_task_whose_first_cancellation_is_lost():
    task, inners = _task_looping_on_wait_for()
    await asyncio.sleep(0)
    inners[-1].set_result(None)
    async with asyncio.timeout(5):
        await cancel_and_wait(task)  # its first cancellation lands in the same window
    assert task.cancelled()


async def test_cancel_and_wait_raises_what_the_task_raised_other_than_its_cancellation():
    async def failing_when_cancelled() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("cleanup failed") from None

    task = asyncio.ensure_future(failing_when_cancelled())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="^cleanup failed$"):
        await cancel_and_wait(task)
