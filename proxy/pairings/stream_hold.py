"""One driver for holding an upstream stream while a client's GET stream lasts (docs/behaviour.md §5.9).

Three feeds of a session's GET stream hold something upstream for as long as the client keeps its
GET stream open: a `subscriptions/listen` (`v1_lists.ListPush`), the pooled upstream session's
GET stream heard through its listener (`session_push.SessionPush`), and the GET stream of a v1
session's own upstream session (`v1_own_session.OwnSessions`). They share one shape, driven here
by `hold`:

* one **attempt** at a time (a coroutine the feed gives), raced against the end of the client's
  stream: when the client's stream ends first, the attempt is cancelled (which closes what it
  opened upstream) and the hold is over;
* an attempt that ends by itself says whether to **try again** (`True`) or **stop** (`False`): the
  stop rules differ by feed (a JSON-RPC refusal of the listen, a backend without GET stream);
* between attempts the hold waits a **back-off** (`Backoff`): `RETRY_S` first, doubling up to
  `MAX_RETRY_S`, and back to `RETRY_S` once an attempt was open (`Backoff.reset`, called by the
  attempt when the backend acknowledged the listen or opened the stream): a break after that is
  not a backend that keeps failing;
* an unexpected exception is logged with its traceback and ends the hold (never silently: the
  client would miss every change); cancelling the hold cancels its attempt.

The feed's own clean-up (its table of holds, its `ready` event) stays in the feed, in a `finally`
around `hold`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

RETRY_S = 1.0
"""A hold whose attempt ended is tried again this long after..."""
MAX_RETRY_S = 30.0
"""...doubling while attempts keep failing, up to this."""


class Backoff:
    """The wait before the next attempt (s): `first_s`, doubling at each `next()` up to `max_s`,
    back to `first_s` at `reset()`."""

    def __init__(self, first_s: float = RETRY_S, max_s: float = MAX_RETRY_S):
        self.first_s = first_s
        self.max_s = max_s
        self.delay_s = first_s

    def reset(self) -> None:
        """The attempt was open: the next wait is `first_s` again."""
        self.delay_s = self.first_s

    def next(self) -> float:
        """The wait before the next attempt (s); the one after it doubles (at most `max_s`)."""
        delay = self.delay_s
        self.delay_s = min(delay * 2, self.max_s)
        return delay


Attempt = Callable[[Backoff], Awaitable[bool]]
"""One attempt of a feed: given the hold's back-off (to `reset` when open), returns whether to try
again after the back-off (True) or to stop holding (False)."""


async def hold(ended: asyncio.Event, attempt: Attempt, *, what: str, logger: logging.Logger = log, backoff: Backoff | None = None) -> None:
    """Run `attempt` again and again until `ended` is set or an attempt says stop.

    `what` names the hold in the line `logger` writes for an unexpected exception (e.g. "listening
    upstream for a v1 session's GET stream"). Returns when the client's stream ended, an attempt returned False,
    or an attempt raised (logged); raises `CancelledError` when cancelled (the attempt running is
    cancelled first).
    """
    backoff = backoff if backoff is not None else Backoff()
    ender = asyncio.ensure_future(ended.wait())
    running: asyncio.Future[bool] | None = None
    try:
        while not ended.is_set():
            running = asyncio.ensure_future(attempt(backoff))
            await asyncio.wait([running, ender], return_when=asyncio.FIRST_COMPLETED)
            if not running.done():
                return  # the client's stream ended: what the attempt holds goes with it (finally)
            if not running.result():
                return
            await asyncio.wait([ender], timeout=backoff.next())
    except asyncio.CancelledError:
        raise
    except Exception:  # never let a hold die silently: the client would miss every change
        logger.exception(what)
    finally:
        ender.cancel()
        if running is not None and not running.done():
            running.cancel()  # closes what it opened upstream
