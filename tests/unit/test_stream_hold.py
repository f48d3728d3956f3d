"""The one driver of the holds that feed a session's GET stream (proxy/pairings/stream_hold.py)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from proxy.pairings.stream_hold import MAX_RETRY_S, RETRY_S, Backoff, hold


def test_the_backoff_doubles_up_to_its_bound_and_resets():
    backoff = Backoff()
    assert (RETRY_S, MAX_RETRY_S) == (1.0, 30.0)
    assert [backoff.next() for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    backoff.reset()
    assert [backoff.next() for _ in range(2)] == [1.0, 2.0]


async def test_attempts_are_made_again_after_the_backoff_until_one_says_stop():
    waits: list[float] = []
    answers = iter([True, True, False])

    class Recording(Backoff):
        def next(self) -> float:
            waits.append(self.delay_s)
            super().next()
            return 0.0  # the test waits for nothing; the sequence of waits is what it checks

    async def attempt(backoff: Backoff) -> bool:
        return next(answers)

    await asyncio.wait_for(hold(asyncio.Event(), attempt, what="test", backoff=Recording(0.5, 1.5)), 5)
    assert waits == [0.5, 1.0]  # two tries again, then the third attempt said stop


async def test_an_attempt_that_was_open_resets_the_backoff():
    waits: list[float] = []
    calls = 0

    class Recording(Backoff):
        def next(self) -> float:
            waits.append(self.delay_s)
            super().next()
            return 0.0

    async def attempt(backoff: Backoff) -> bool:
        nonlocal calls
        calls += 1
        if calls == 3:
            backoff.reset()
        return calls < 5

    await asyncio.wait_for(hold(asyncio.Event(), attempt, what="test", backoff=Recording(1.0, 30.0)), 5)
    assert waits == [1.0, 2.0, 1.0, 2.0]


async def test_the_end_of_the_clients_stream_cancels_the_attempt_and_ends_the_hold():
    ended = asyncio.Event()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def attempt(backoff: Backoff) -> bool:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    holding = asyncio.ensure_future(hold(ended, attempt, what="test"))
    await asyncio.wait_for(started.wait(), 5)
    ended.set()
    await asyncio.wait_for(holding, 5)
    await asyncio.wait_for(cancelled.wait(), 5)
    assert holding.result() is None


async def test_the_end_of_the_clients_stream_ends_the_wait_between_attempts():
    ended = asyncio.Event()
    calls = 0

    async def attempt(backoff: Backoff) -> bool:
        nonlocal calls
        calls += 1
        ended.set()  # the stream ends while the hold would wait an hour before the next attempt
        return True

    await asyncio.wait_for(hold(ended, attempt, what="test", backoff=Backoff(3600.0, 3600.0)), 5)
    assert calls == 1


async def test_cancelling_the_hold_cancels_its_attempt():
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def attempt(backoff: Backoff) -> bool:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    holding = asyncio.ensure_future(hold(asyncio.Event(), attempt, what="test"))
    await asyncio.wait_for(started.wait(), 5)
    holding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await holding
    await asyncio.wait_for(cancelled.wait(), 5)


async def test_an_unexpected_exception_is_logged_and_ends_the_hold(caplog):
    logger = logging.getLogger("proxy.pairings.some_feed")

    async def attempt(backoff: Backoff) -> bool:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="proxy.pairings.some_feed"):
        await asyncio.wait_for(hold(asyncio.Event(), attempt, what="holding something", logger=logger), 5)
    assert [(r.name, r.getMessage(), r.exc_info[0]) for r in caplog.records] == [
        ("proxy.pairings.some_feed", "holding something", RuntimeError)
    ]
