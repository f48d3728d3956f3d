"""What a `ProcessSlot` carries its virtual sessions over: a channel of JSON-RPC messages to one
server, opened as its launch says (docs/decisions.md §171).

A stdio server's channel is its process (`process.Launch`, `process.StdioProcess`); an HTTP+SSE
server's is one upstream SSE session, its event stream and its POST endpoint
(`proxy/upstream/http_sse.py`). The slot runs `initialize` over the channel, routes what comes back,
and watches it end, the same way for both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .process import LongLine


class Channel(Protocol):
    """One started (or starting) channel to a server."""

    async def start(self) -> None:
        """Open the channel. Raises `OSError` when it cannot be opened."""

    def send(self, message: dict[str, Any]) -> bool:
        """Send one message; False when the channel is gone."""

    def send_line(self, line: bytes) -> bool:
        """Send one message's JSON bytes (no newline); False when the channel is gone."""

    def ended(self) -> str:
        """Why the channel is gone (once it ended), for log lines and errors."""

    def ended_before_initialize(self) -> str:
        """Why a channel that ended before its server answered `initialize` failed."""

    async def stop(self) -> None:
        """End the channel gracefully; returns once it is gone."""

    async def kill(self) -> None:
        """End the channel at once (its server found hung)."""


class ChannelLaunch(Protocol):
    """How a slot's channel is opened, and how the slot speaks of it."""

    name: str
    max_line_bytes: int
    grace_s: float
    restarts: bool
    """Whether a lost channel is opened again (a stdio process) or its slot ends with its session."""
    noun: str
    gone: str

    def open(self, *, on_message: Callable[[dict[str, Any], bytes | None], None], on_exit: Callable[[int | None], None],
             on_long_line: Callable[[LongLine], None] | None = None) -> Channel:
        """The channel to start; `on_message` gets each message, `on_exit` is called once it ended."""

    def cannot_start(self, exc: OSError) -> str:
        """Why the first start failed for good when opening raised `exc`."""

    def not_started(self, exc: OSError) -> str:
        """Why one attempt to open the channel failed (its log line)."""
