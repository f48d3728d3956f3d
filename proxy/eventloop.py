"""The event loop `mcp-tasks-proxy serve` runs on: uvloop when it is installed, else asyncio's own.

uvloop is a dependency wherever it exists (not on Windows; docs/decisions.md §188): it takes 12 to
16 % off the instructions of a call through the proxy (docs/performance.md).
`MCP_TASKS_PROXY_EVENT_LOOP` chooses: `auto` (the default: uvloop if importable), `uvloop`
(required: an error when missing) or `asyncio`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

ENV_EVENT_LOOP = "MCP_TASKS_PROXY_EVENT_LOOP"
T = TypeVar("T")
log = logging.getLogger(__name__)


def loop_factory(environ: Mapping[str, str] = os.environ) -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """The loop's name ("uvloop" or "asyncio") and its factory (None: asyncio's default).

    Raises `RuntimeError` when `MCP_TASKS_PROXY_EVENT_LOOP=uvloop` but uvloop is not installed,
    and `ValueError` for a value other than auto, uvloop or asyncio.
    """
    choice = (environ.get(ENV_EVENT_LOOP) or "auto").strip().lower()
    if choice not in ("auto", "uvloop", "asyncio"):
        raise ValueError(f"{ENV_EVENT_LOOP} must be auto, uvloop or asyncio, not {choice!r}")
    if choice == "asyncio":
        return "asyncio", None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise RuntimeError(f"{ENV_EVENT_LOOP}=uvloop but uvloop is not installed (it is a dependency where it exists: "
                               "not on Windows)") from None
        return "asyncio", None
    return "uvloop", uvloop.new_event_loop


def run(main: Callable[[], Coroutine[Any, Any, T]], name: str, factory: Callable[[], asyncio.AbstractEventLoop] | None) -> T:
    """`asyncio.run(main())` on the loop `loop_factory` chose."""
    log.info("event loop: %s", name)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


RECANCEL_S = 0.1
"""How often `cancel_and_wait` cancels a task again while it has not ended."""


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended, cancelling it again every `RECANCEL_S` while it
    runs on (docs/decisions.md §186): one cancellation can be lost. Python 3.11's
    `asyncio.wait_for` returns its inner future's result, dropping the cancellation, when the
    cancellation lands after that future finished but before the waiting task resumed; redis-py
    sends every command under one (`socket_timeout`), so a loop task that talks to Redis
    (`RolloutDriver.run`, `RedisTaskStore.maintain`) could run on for ever, and its awaiter wait
    for ever. Raises what the task raised, its cancellation aside."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
    if not task.cancelled():
        task.result()
